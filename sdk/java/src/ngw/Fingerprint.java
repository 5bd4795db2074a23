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

    /**
     * Watches what a running JVM holds of a class path: its jars, and the class files of the
     * classes loaded from its directories (the other files of a directory, a build's outputs
     * say, do not make the JVM stale). A class file is watched from the first check after
     * its class was loaded; with no instrumentation, every file under the directories is.
     */
    public static final class Watch {
        private final List<String> classpath;
        private final java.io.File[] entries;
        private final java.lang.instrument.Instrumentation inst;
        private final long jars;
        private final long all;
        private final java.util.Map<Path, Long> stamps = new java.util.HashMap<>();
        private final java.util.Set<Path> dirs = new java.util.HashSet<>();

        public Watch(List<String> classpath, java.lang.instrument.Instrumentation inst) {
            this.classpath = classpath;
            this.entries = classpath.stream().map(java.io.File::new).toArray(java.io.File[]::new);
            this.inst = inst;
            this.jars = quickJars();
            this.all = inst == null ? of(classpath) : 0;
            for (String entry : classpath) {
                Path p = Path.of(entry).toAbsolutePath().normalize();
                if (Files.isDirectory(p)) {
                    dirs.add(p);
                }
            }
        }

        /** True when a jar changed (a few {@code stat}s each: cheap enough for every session). */
        public boolean jarsChanged() {
            return quickJars() != jars;
        }

        /**
         * The jars' paths, sizes and times, hashed like {@link #jars} but through {@code
         * java.io.File}, whose calls are each one system call with little code around it: this
         * runs for every session, long before the JIT has compiled the JDK's file code.
         */
        private long quickJars() {
            long h = 0xcbf29ce484222325L;
            for (java.io.File f : entries) {
                h = mix(h, f.getPath().hashCode());
                if (f.isDirectory()) {
                    continue;
                }
                h = mix(mix(h, f.length()), f.lastModified());
            }
            return h;
        }

        /** True when a jar or a watched class file changed. */
        public synchronized boolean changed() {
            if (jarsChanged()) {
                return true;
            }
            if (inst == null) {
                return of(classpath) != all;
            }
            if (dirs.isEmpty()) {
                return false;
            }
            for (Class<?> c : inst.getAllLoadedClasses()) {
                try {
                    java.security.CodeSource cs = c.getProtectionDomain().getCodeSource();
                    if (cs == null || cs.getLocation() == null || !"file".equals(cs.getLocation().getProtocol())) {
                        continue;
                    }
                    Path dir = Path.of(cs.getLocation().toURI()).toAbsolutePath().normalize();
                    if (dirs.contains(dir) && !c.isArray() && !c.isHidden()) {
                        Path f = dir.resolve(c.getName().replace('.', '/') + ".class");
                        stamps.computeIfAbsent(f, x -> file(0, x));
                    }
                } catch (RuntimeException | java.net.URISyntaxException e) {
                    // A class with no usable location is not from the class path.
                }
            }
            for (java.util.Map.Entry<Path, Long> e : stamps.entrySet()) {
                if (file(0, e.getKey()) != e.getValue()) {
                    return true;
                }
            }
            return false;
        }
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
            // One stat per entry: whether it is a directory, and a jar's size and time.
            BasicFileAttributes a = attributes(p);
            if (a != null && a.isDirectory()) {
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
                h = file(h, p, a);
            }
        }
        return h;
    }

    private static BasicFileAttributes attributes(Path f) {
        try {
            return Files.readAttributes(f, BasicFileAttributes.class);
        } catch (IOException e) {
            return null;
        }
    }

    private static long file(long h, Path f) {
        return file(h, f, attributes(f));
    }

    private static long file(long h, Path f, BasicFileAttributes a) {
        if (a == null) {
            return mix(h, 0);
        }
        h = mix(h, f.toString().hashCode());
        h = mix(h, a.size());
        return mix(h, a.lastModifiedTime().toMillis());
    }

    private static long mix(long h, long v) {
        h ^= v;
        return h * 0x100000001b3L;
    }
}
