/**
 * What the classpath's code looks like on disk: the path, size and modification time of
 * every jar and of every file under every directory entry, hashed. A change means the JVM's
 * loaded classes may be stale. {@link #jars} looks at the jars alone (a {@code stat} each),
 * cheap enough for every session; {@link #of} walks the directories too, for a background
 * check.
 */
package ngw;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.BasicFileAttributes;
import java.util.List;
import java.util.stream.Stream;

/** See the file comment. */
public final class Fingerprint {
    /** Directory trees larger than this are fingerprinted by their first files only. */
    private static final int MAX_FILES = 50_000;

    private Fingerprint() {}

    /** The fingerprint of {@code classpath}'s entries. */
    public static long of(List<String> classpath) {
        return hash(classpath, true);
    }

    /** The fingerprint of {@code classpath}'s files (jars), directories left out. */
    public static long jars(List<String> classpath) {
        return hash(classpath, false);
    }

    private static long hash(List<String> classpath, boolean walk) {
        long h = 0xcbf29ce484222325L;
        for (String entry : classpath) {
            Path p = Path.of(entry);
            h = mix(h, entry.hashCode());
            if (Files.isDirectory(p)) {
                if (!walk) {
                    continue;
                }
                try (Stream<Path> files = Files.walk(p)) {
                    long[] acc = {h};
                    files.limit(MAX_FILES).forEach(f -> acc[0] = file(acc[0], f));
                    h = acc[0];
                } catch (IOException | RuntimeException e) {
                    h = mix(h, -1);
                }
            } else {
                h = file(h, p);
            }
        }
        return h;
    }

    private static long file(long h, Path f) {
        try {
            BasicFileAttributes a = Files.readAttributes(f, BasicFileAttributes.class);
            h = mix(h, f.toString().hashCode());
            h = mix(h, a.size());
            return mix(h, a.lastModifiedTime().toMillis());
        } catch (IOException e) {
            return mix(h, 0);
        }
    }

    private static long mix(long h, long v) {
        h ^= v;
        return h * 0x100000001b3L;
    }
}
