/**
 * When the exact mode's next spare initialises the program's main class ahead
 * ({@link SpareInit}), and the programs that cannot.
 *
 * <p>A spare goes ahead for a {@link Key}: the full environment, directory, umask, ignored
 * signals and the kinds of descriptors 0-2 of the session it is started after, and takes
 * only a session whose key is equal. It goes ahead when the last two sessions had the same
 * key (the sessions come steadily from one place, so the next one most likely does too; a
 * session whose environment changes every time is better served by a spare that has not
 * gone ahead, which takes any session of its directory and start-up environment), when
 * descriptors 0-2 were all open and none a terminal (a sentinel cannot stand for a terminal
 * or a closed descriptor), and when the program may.
 *
 * <p>A program may not once a spare's initialisation was not clean: that spare is discarded,
 * a notice ({@code ahead}) says why, the counter {@code ahead-discarded} counts it, and the
 * program's key (the class-data cache's: the JDK, class path and its jars' contents, JVM
 * options; with the main class and its file) is remembered in {@code
 * $NGW_STATE_DIR/jvm-ahead/<key>.off}, holding the reason, so that later workers of the same
 * program do not try again. A changed jar or main class is a new key. {@code NGW_JAVA_AHEAD=0}
 * turns initialisation ahead off.
 */
package ngw.exact;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;

/** See the file comment. */
final class Ahead {
    /** What a spare that went ahead was started with; a session must match all of it. */
    record Key(String cwd, Map<String, String> env, int umask, List<String> ignored, String kinds) {
        static Key of(ExactWorker.Run r) {
            return new Key(r.cwd, Map.copyOf(r.env), r.umask, List.copyOf(r.ignored), r.kinds);
        }

        /** Why a session of key {@code k} cannot take this spare, or null if it can. */
        String difference(Key k) {
            if (!cwd.equals(k.cwd)) {
                return "it initialised the main class in another directory";
            }
            TreeSet<String> names = new TreeSet<>(env.keySet());
            names.addAll(k.env.keySet());
            for (String n : names) {
                if (!java.util.Objects.equals(env.get(n), k.env.get(n))) {
                    return "it initialised the main class with another value of " + Posix.decoded(n);
                }
            }
            if (umask != k.umask) {
                return "it initialised the main class with another umask";
            }
            if (!ignored.equals(k.ignored)) {
                return "it initialised the main class with other signals ignored";
            }
            if (!kinds.equals(k.kinds)) {
                return "it initialised the main class with other kinds of descriptors 0-2 (" + kinds + ", not "
                        + k.kinds + ")";
            }
            return null;
        }
    }

    private final ExactWorker worker;
    private final ClassCache cache;
    private final Path dir;
    /** Why no spare goes ahead in this worker, or null. */
    private String off;
    /** The key of the last session, and whether the one before it had the same. */
    private Key last;
    private boolean steady;

    Ahead(ExactWorker worker, ClassCache cache) {
        this.worker = worker;
        this.cache = cache;
        this.dir = ClassCache.stateDir().resolve("jvm-ahead");
        String v = System.getenv("NGW_JAVA_AHEAD");
        if (v != null && v.trim().equals("0")) {
            off = "NGW_JAVA_AHEAD is 0";
        } else if (!Guard.supported()) {
            off = "the guard needs Linux on x86-64";
        }
    }

    /**
     * A session of key {@code k} ended: the key the next spare initialises for, or null when
     * it starts without going ahead.
     */
    synchronized Key next(Key k) {
        steady = k.equals(last);
        last = k;
        if (!steady || off != null || !k.kinds.equals("ooo")) {
            return null;
        }
        Path file = file();
        if (file == null || Files.exists(file)) {
            return null;
        }
        return k;
    }

    /** A spare's initialisation was not clean: {@code program} says whether by the program's doing. */
    synchronized void discarded(String why, boolean program) {
        worker.notice("count", "ahead-discarded", -1);
        if (!program) {
            off = why;
            worker.notice("ahead", "spares do not initialise the main class ahead: " + why, -1);
            return;
        }
        worker.notice("ahead", "this program's spares no longer initialise its main class ahead: " + why, -1);
        Path file = file();
        if (file == null) {
            off = why;
            return;
        }
        try {
            Files.createDirectories(dir);
            Path tmp = dir.resolve(file.getFileName() + ".tmp." + ProcessHandle.current().pid());
            Files.writeString(tmp, why + "\n", StandardCharsets.UTF_8);
            Files.move(tmp, file, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
        } catch (IOException e) {
            worker.log("cannot remember that the main class cannot go ahead: " + e.getMessage());
            off = why;
        }
    }

    /** The file that says this program cannot go ahead; null when its key cannot be made. */
    private Path file() {
        try {
            return dir.resolve(cache.programKey(worker.options().mainClass) + ".off");
        } catch (IOException e) {
            worker.log("initialising ahead is off: " + e.getMessage());
            return null;
        }
    }
}
