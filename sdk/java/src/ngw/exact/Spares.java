/**
 * The exact mode's spare JVMs: how many to keep, where and with what environment to start
 * them, and which session a spare may take.
 *
 * <p>A spare is started in the working directory and with the environment of the session
 * before it (the worker's own at first), since the next session most likely comes from the
 * same place. It may take a session from the same directory whose environment has the same
 * values of the variables a JVM reads while it starts ({@link #STARTUP}); any other session
 * runs cold, and the spares are replaced by ones started where that session came from.
 * Every session that runs cold says why in a {@code fallback} notice.
 *
 * <p>A spare may also initialise the main class ahead ({@link Ahead}, {@link SpareInit}):
 * then it takes only a session whose full environment, directory, umask, ignored signals and
 * kinds of descriptors 0-2 are those it was started with ({@code ahead-used} counts them),
 * and one whose initialisation was not clean is discarded and replaced by one that does not
 * go ahead.
 */
package ngw.exact;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.TreeMap;
import java.util.TreeSet;

import ngw.wire.Chunk;

/** See the file comment. */
final class Spares {
    /** Environment variables the JVM (or the C library under it) reads while it starts. */
    private static boolean startup(String name) {
        return name.equals("JAVA_TOOL_OPTIONS") || name.equals("_JAVA_OPTIONS") || name.equals("JDK_JAVA_OPTIONS")
                || name.equals("CLASSPATH") || name.equals("LANG") || name.equals("LANGUAGE")
                || name.startsWith("LC_") || name.startsWith("LD_") || name.startsWith("MALLOC_")
                || name.equals("GLIBC_TUNABLES") || name.equals("TZ");
    }

    /** One spare JVM. */
    private static final class Spare {
        final int pid;
        final int sock;
        final String cwd;
        final Map<String, String> startupEnv;
        /** The class path's fingerprint when the spare started. */
        final long code;
        /** The session state it initialises the main class for; null: it does not go ahead. */
        final Ahead.Key ahead;
        /** 0 starting, 1 ready, -1 dead. */
        int state;
        /** Killed by the worker (not a failure). */
        boolean killed;
        /** What it was started with of the class-data cache, or null. */
        ClassCache.Use cache;

        Spare(int pid, int sock, String cwd, Map<String, String> startupEnv, long code, Ahead.Key ahead) {
            this.code = code;
            this.ahead = ahead;
            this.pid = pid;
            this.sock = sock;
            this.cwd = cwd;
            this.startupEnv = startupEnv;
        }
    }

    private final ExactWorker worker;
    private final int target;
    private final List<Spare> spares = new ArrayList<>();
    private final Ahead ahead;
    private int failures;
    private boolean stopped;
    /** Sessions whose {@code X} went before their {@link #ended}. */
    private int refillsDue;

    Spares(ExactWorker worker, int target) {
        this.worker = worker;
        this.target = target;
        this.ahead = new Ahead(worker, worker.cache());
    }

    private static Map<String, String> startupEnv(Map<String, String> env) {
        Map<String, String> m = new TreeMap<>();
        env.forEach((k, v) -> {
            if (startup(k)) {
                m.put(k, v);
            }
        });
        return m;
    }

    /**
     * Whether a spare with this start-up environment (and no class-data cache in play) tells
     * its exit status early ({@link EarlyExit}): not when {@code NGW_JAVA_EXIT_EARLY=0}, and only with JVM options that
     * print nothing as the JVM exits ({@link #quietAtExit}) and no options from the
     * environment.
     */
    private boolean early(Map<String, String> startupEnv) {
        if ("0".equals(System.getenv("NGW_JAVA_EXIT_EARLY"))) {
            return false;
        }
        for (String v : List.of("JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS")) {
            if (startupEnv.containsKey(v)) {
                return false;
            }
        }
        return quietAtExit(worker.options().jvmOptions);
    }

    /** Options with a value in the next argument. */
    private static final java.util.Set<String> WITH_VALUE = java.util.Set.of("--add-opens", "--add-exports",
            "--add-reads", "--add-modules", "--enable-native-access", "-p", "--module-path");

    /**
     * True if these JVM options are known to do nothing after the program's shutdown hooks
     * (no logging, no agents, no recording dumped at exit): system properties, heap and
     * stack sizes, assertions, module options, the collector.
     */
    static boolean quietAtExit(List<String> options) {
        for (int i = 0; i < options.size(); i++) {
            String o = options.get(i);
            if (WITH_VALUE.contains(o)) {
                i++;
                continue;
            }
            boolean known = o.startsWith("-D") || o.startsWith("-Xmx") || o.startsWith("-Xms") || o.startsWith("-Xss")
                    || o.startsWith("-Xmn") || o.matches("-(ea|da|esa|dsa|enableassertions|disableassertions|"
                            + "enablesystemassertions|disablesystemassertions)(:.*)?")
                    || o.matches("--(add-opens|add-exports|add-reads|add-modules|enable-native-access)=.*")
                    || o.matches("-XX:[+-]Use(Serial|Parallel|G1|Z|Shenandoah|Epsilon)GC")
                    || o.matches("-XX:(MaxRAMPercentage|InitialRAMPercentage|TieredStopAtLevel|"
                            + "MaxMetaspaceSize|ReservedCodeCacheSize)=[0-9.]+[kKmMgG]?")
                    || o.equals("-XX:+UnlockExperimentalVMOptions") || o.equals("-Xshare:auto");
            if (!known) {
                return false;
            }
        }
        return true;
    }

    /** Runs the session on a spare: null if a spare took it, else why it must run cold. */
    String run(ExactWorker.Run r) {
        Taken t = take(r.cwd, startupEnv(r.env), Ahead.Key.of(r));
        if (t.spare() == null) {
            return t.why();
        }
        Spare s = t.spare();
        if (s.code != code()) {
            kill(s);
            worker.notice("stale", "the classpath changed on disk since the spare JVM started", r.id);
            return "the spare JVM holds classes that changed on disk since it started";
        }
        try {
            byte[] request = request(r);
            int[] fds = java.util.Arrays.stream(r.stdio).filter(f -> f >= 0).toArray();
            if (r.pty >= 0) {
                fds = java.util.Arrays.copyOf(fds, fds.length + 1);
                fds[fds.length - 1] = r.pty;
            }
            Posix.send(s.sock, request, fds);
            byte[] answer = new byte[512];
            int n = Posix.readSome(s.sock, answer);
            if (n > 0 && (answer[0] == 'R' || answer[0] == 'E')) {
                r.pid = s.pid;
                r.cache = s.cache;
                if (s.ahead != null) {
                    worker.notice("count", "ahead-used", r.id);
                }
                if (answer[0] == 'E') {
                    // The spare tells its exit status on the channel (EarlyExit).
                    r.exitChannel = s.sock;
                    r.exitPrefix = java.util.Arrays.copyOfRange(answer, 1, n);
                } else {
                    Posix.closeQuietly(s.sock);
                }
                return null;
            }
            String why = n > 1 ? new String(answer, 1, n - 1, StandardCharsets.UTF_8) : "the spare JVM died";
            kill(s);
            return why;
        } catch (IOException e) {
            kill(s);
            return "the spare JVM failed: " + e.getMessage();
        }
    }

    private byte[] request(ExactWorker.Run r) {
        java.io.ByteArrayOutputStream out = new java.io.ByteArrayOutputStream();
        StringBuilder map = new StringBuilder();
        for (int i = 0; i < 3; i++) {
            if (r.stdio[i] >= 0) {
                map.append(map.length() > 0 ? "," : "").append(i);
            }
        }
        chunk(out, 'M', map.toString());
        if (r.pty >= 0) {
            chunk(out, 'T', "");
        }
        for (String a : r.args) {
            chunk(out, 'A', a);
        }
        r.env.forEach((k, v) -> chunk(out, 'E', k + "=" + v));
        if (r.umask >= 0) {
            chunk(out, 'U', Integer.toOctalString(r.umask));
        }
        for (String s : r.ignored) {
            chunk(out, 'I', s);
        }
        chunk(out, Chunk.COMMAND, "");
        return out.toByteArray();
    }

    /** A chunk whose payload is {@code text}'s bytes ({@link Posix#raw}). */
    private static void chunk(java.io.ByteArrayOutputStream out, int type, String text) {
        byte[] b = text.getBytes(StandardCharsets.ISO_8859_1);
        out.write(b.length >>> 24);
        out.write(b.length >>> 16);
        out.write(b.length >>> 8);
        out.write(b.length);
        out.write(type);
        out.write(b, 0, b.length);
    }

    /** A spare, or why there is none. */
    private record Taken(Spare spare, String why) {}

    /**
     * A spare that went ahead for exactly {@code key}, else a plain one for this directory
     * and start-up environment, waiting for it to be ready; or why there is none.
     */
    private Taken take(String cwd, Map<String, String> startupEnv, Ahead.Key key) {
        Spare s;
        synchronized (this) {
            long deadline = System.nanoTime() + DUE_WAIT_MS * 1_000_000;
            while (true) {
                s = spares.stream().filter(x -> x.state >= 0 && x.ahead != null && x.ahead.difference(key) == null)
                        .findFirst().orElse(null);
                if (s == null) {
                    s = spares.stream().filter(x -> x.state >= 0 && x.ahead == null && x.cwd.equals(cwd)
                            && x.startupEnv.equals(startupEnv)).findFirst().orElse(null);
                }
                long left = deadline - System.nanoTime();
                if (s != null || refillsDue <= 0 || left <= 0) {
                    break;
                }
                try {
                    wait(Math.max(1, left / 1_000_000));
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    break;
                }
            }
            if (s == null) {
                return new Taken(null, why(cwd, startupEnv, key));
            }
            spares.remove(s);
            while (s.state == 0) {
                try {
                    wait();
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    return new Taken(null, "interrupted while the spare JVM started");
                }
            }
        }
        if (s.state == 1) {
            return new Taken(s, null);
        }
        return new Taken(null, s.ahead != null ? "the spare JVM that initialised the main class ahead was discarded"
                : "the spare JVM exited before it was ready");
    }

    /** Why no spare can take a session of this directory, start-up environment and key. */
    private String why(String cwd, Map<String, String> startupEnv, Ahead.Key key) {
        if (target == 0) {
            return "no spare JVMs are kept (--spares 0)";
        }
        Spare x = spares.stream().filter(y -> y.state >= 0).findFirst().orElse(null);
        if (x == null) {
            return "no spare JVM was ready (each takes one session; the next starts when a session ends)";
        }
        if (x.ahead != null) {
            return "the spare JVM cannot take it: " + x.ahead.difference(key);
        }
        if (!x.cwd.equals(cwd)) {
            return "the spare JVM was started in another directory";
        }
        TreeSet<String> names = new TreeSet<>(x.startupEnv.keySet());
        names.addAll(startupEnv.keySet());
        for (String n : names) {
            if (!Objects.equals(x.startupEnv.get(n), startupEnv.get(n))) {
                return "the spare JVM was started with another value of " + Posix.decoded(n);
            }
        }
        return "no spare JVM could take it";
    }

    /**
     * A session ended: the spares are replaced by ones started where it came from, going
     * ahead for its key when {@link Ahead} says so.
     */
    void ended(ExactWorker.Run r, boolean due) {
        try {
            refill(r.cwd, r.env, ahead.next(Ahead.Key.of(r)));
        } finally {
            if (due) {
                synchronized (this) {
                    refillsDue--;
                    notifyAll();
                }
            }
        }
    }

    /**
     * A session is about to end ({@code X}) and {@link #ended} will follow: a session that
     * comes meanwhile waits for the spares it starts rather than running cold.
     */
    synchronized void due() {
        refillsDue++;
    }

    /** The longest a session waits for the spares of the session before it to be started. */
    private static final long DUE_WAIT_MS = 2000;

    /**
     * Starts spares until {@link #target} are there for {@code cwd} and {@code env}, each
     * going ahead for {@code go} unless it is null; kills the others.
     */
    synchronized void refill(String cwd, Map<String, String> env, Ahead.Key go) {
        if (stopped || target == 0 || failures >= 3) {
            return;
        }
        Map<String, String> startupEnv = startupEnv(env);
        long code = code();
        for (Spare s : new ArrayList<>(spares)) {
            boolean wanted = s.code == code && (go != null ? go.equals(s.ahead)
                    : s.ahead == null && s.cwd.equals(cwd) && s.startupEnv.equals(startupEnv));
            if (!wanted) {
                spares.remove(s);
                kill(s);
            }
        }
        while (spares.size() < target) {
            try {
                spares.add(spawn(cwd, env, startupEnv, go));
            } catch (IOException e) {
                worker.log("cannot start a spare JVM: " + e.getMessage());
                failures++;
                return;
            }
        }
    }

    private Spare spawn(String cwd, Map<String, String> env, Map<String, String> startupEnv, Ahead.Key go)
            throws IOException {
        ngw.Options o = worker.options();
        long code = code();
        List<String> argv = new ArrayList<>();
        ClassCache.Use cache = worker.cache().start(argv);
        argv.addAll(o.jvmOptions);
        argv.add("-Dngw.spare.main=" + o.mainClass);
        argv.add("-Dngw.spare.cp=" + (o.jar != null ? o.jar : String.join(":", o.classpath)));
        argv.add("-Dngw.spare.command=" + (o.jar != null ? o.jar : o.mainClass));
        String ng = ExactWorker.anchor();
        if (ng != null) {
            argv.add("-Dngw.spare.anchor=" + ng);
        }
        // The agent's options change the JVM's boot class path and modules, and the JDK then
        // refuses an archive made without them: a spare that maps or records the program's
        // class-data cache is told its exit by waitpid.
        boolean cached = cache != null && (cache.given || cache.recording != null);
        if (!cached && early(startupEnv)) {
            String lib = new java.io.File(o.workerClasspath.split(":")[0]).getParent();
            argv.add(0, "-javaagent:" + new java.io.File(lib, "ngw-java.jar"));
            argv.add(0, "-Xbootclasspath/a:" + new java.io.File(lib, "ngw-boot.jar"));
            argv.add("-Dngw.spare.early=1");
        }
        if (go != null) {
            argv.add("-Dngw.spare.ahead=1");
            if (go.umask() >= 0) {
                argv.add("-Dngw.spare.umask=" + Integer.toOctalString(go.umask()));
            }
            argv.add("-Dngw.spare.ignored=" + String.join(",", go.ignored()));
        }
        argv.add("-cp");
        argv.add(String.join(":", o.classpath) + ":" + o.workerClasspath);
        argv.add("ngw.exact.Spare");
        argv.replaceAll(Posix::raw);
        argv.add(0, worker.java());
        Map<String, String> spareEnv = new LinkedHashMap<>(env);
        int[] pair = Posix.socketPair();
        int pid;
        try {
            pid = Posix.spawn(new Posix.Spawn(worker.java(), argv, ExactWorker.envList(spareEnv), cwd,
                    new int[] {Posix.DEV_NULL, 2, 2}, pair[1]));
        } catch (IOException e) {
            Posix.closeQuietly(pair[0]);
            worker.cache().abandoned(cache);
            throw e;
        } finally {
            Posix.closeQuietly(pair[1]);
        }
        Spare s = new Spare(pid, pair[0], cwd, startupEnv, code, go);
        s.cache = cache;
        Thread t = new Thread(() -> awaitReady(s), "ngw-spare-" + pid);
        t.setDaemon(true);
        t.start();
        return s;
    }

    private void awaitReady(Spare s) {
        byte[] b = new byte[512];
        int n;
        try {
            n = Posix.readSome(s.sock, b);
        } catch (IOException e) {
            n = 0;
        }
        synchronized (this) {
            if (s.killed) {
                s.state = -1;
                Posix.closeQuietly(s.sock);
                reap(s);
            } else if (n >= 1 && b[0] == (s.ahead != null ? 'a' : 'r')) {
                s.state = 1;
                failures = 0;
            } else if (s.ahead != null) {
                // Its initialisation was not clean (or it ended while initialising): never
                // handed a session, and a spare that does not go ahead takes its place.
                s.state = -1;
                spares.remove(s);
                kill(s);
                boolean program = n < 1 || b[0] != 'g';
                String why = n > 1 ? new String(b, 1, n - 1, StandardCharsets.UTF_8)
                        : "it ended while initialising the main class";
                worker.log("a spare JVM (pid " + s.pid + ") initialising the main class ahead was discarded: " + why);
                ahead.discarded(why, program);
                if (!stopped) {
                    try {
                        spares.add(spawn(s.cwd, s.ahead.env(), s.startupEnv, null));
                    } catch (IOException e) {
                        worker.log("cannot start a spare JVM: " + e.getMessage());
                        failures++;
                    }
                }
            } else {
                s.state = -1;
                failures++;
                spares.remove(s);
                worker.cache().abandoned(s.cache);
                worker.log("a spare JVM (pid " + s.pid + ") exited before it was ready; see the messages above");
                reap(s);
            }
            notifyAll();
        }
    }

    private synchronized void kill(Spare s) {
        s.killed = true;
        worker.cache().abandoned(s.cache);
        Posix.signal(-s.pid, Posix.SIGKILL);
        if (s.state != 0) {
            Posix.closeQuietly(s.sock);
            reap(s);
        }
    }

    private static void reap(Spare s) {
        Thread t = new Thread(() -> {
            try {
                Posix.waitFor(s.pid);
            } catch (IOException e) {
                // Already reaped.
            }
        }, "ngw-reap-" + s.pid);
        t.setDaemon(true);
        t.start();
    }

    /**
     * What a spare holds of the class path: the jars (a spare has them open, so a replaced jar
     * would still be read from the old file) and the main class's own file (loaded ahead);
     * other classes in directories are read when the session loads them.
     */
    private long code() {
        ngw.Options o = worker.options();
        long h = ngw.Fingerprint.jars(o.classpath);
        if (o.mainClass != null) {
            String file = o.mainClass.replace('.', '/') + ".class";
            for (String e : o.classpath) {
                java.io.File f = new java.io.File(e, file);
                if (f.isFile()) {
                    h = h * 31 + f.lastModified() * 17 + f.length();
                    break;
                }
            }
        }
        return h;
    }

    /** Kills every spare. */
    synchronized void stop() {
        stopped = true;
        for (Spare s : spares) {
            kill(s);
        }
        spares.clear();
    }
}
