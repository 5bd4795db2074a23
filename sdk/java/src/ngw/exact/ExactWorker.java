/**
 * The JVM worker's exact mode, for plain {@code main(String[])} programs: every session is a
 * JVM of its own that sees exactly what {@code java -cp ... Main args} would see (its own
 * environment, working directory, umask, fresh static state, a real {@code System.exit}, the
 * client's own descriptors), and warm means a spare JVM started ahead of time ({@link Spare})
 * takes the session. A session no spare can take exactly runs cold: a new {@code java} with
 * the client's descriptors, environment and directory. Sessions run at once with {@code mux}.
 *
 * <p>The reader thread owns the channel's input (with {@code recvmsg}, for the {@code fds}
 * extension); each session has a launcher thread (spare or cold), a waiter ({@code waitpid}
 * with stops, for {@code signals}) and, when the client passed no descriptors (a stock client,
 * TCP), relay threads between pipes and chunks.
 */
package ngw.exact;

import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;

import ngw.Options;
import ngw.wire.Chunk;
import ngw.wire.ChunkReader;
import ngw.wire.ChunkWriter;
import ngw.wire.Json;

/** See the file comment. */
public final class ExactWorker {
    /** The largest chunk the worker accepts (its hello's {@code max_chunk}). */
    public static final int MAX_CHUNK = 16 * 1024 * 1024;
    /** Sessions at once on one worker, with {@code mux}. */
    public static final int MAX_SESSIONS = 64;

    private final Options options;
    private final List<String> jvmOptions;
    private final List<String> host;
    private final boolean mux;
    private final boolean notices;
    private final boolean fdsExt;
    private final boolean signalsExt;
    private final FdInput input = new FdInput(0);
    private final ChunkReader reader = new ChunkReader(input, MAX_CHUNK);
    private final ChunkWriter writer;
    private final PrintStream log = System.err;
    private final Map<Long, Run> runs = new ConcurrentHashMap<>();
    private final Map<Long, Run> headers = new LinkedHashMap<>();
    private final Spares spares;
    private final ClassCache cache;
    /** Runs each session's launcher and waiter (threads kept for the next session). */
    private final ExecutorService launchers = Executors.newCachedThreadPool(r -> {
        Thread t = new Thread(r, "ngw-launch");
        t.setDaemon(true);
        return t;
    });
    private final String java;
    private volatile boolean quitting;
    private long selected;

    /**
     * One session: its header, its child, its relays. Arguments, environment entries and the
     * directory are strings of the client's bytes ({@link Posix#raw}).
     */
    final class Run {
        final long id;
        final List<String> args = new ArrayList<>(options.leadingArgs.stream().map(Posix::raw).toList());
        final Map<String, String> env = new LinkedHashMap<>();
        String cwd;
        int umask = -1;
        List<String> ignored = List.of();
        String fdMap;
        /** {@code NGW_CLIENT_PTY}: the fds the pseudo-terminal passed last stands for. */
        String ptyMap;
        /** The pseudo-terminal's slave, to be the command's controlling terminal. */
        int pty = -1;
        int[] passed = new int[0];
        final int[] stdio = {-1, -1, -1};
        final BlockingQueue<byte[]> stdin = new ArrayBlockingQueue<>(4);
        int stdinWrite = -1;
        volatile int pid = -1;
        volatile boolean hungUp;
        volatile boolean clientStopped;
        volatile boolean ended;
        Thread[] relays = new Thread[0];
        /** What its JVM was started with of the class-data cache, or null. */
        ClassCache.Use cache;
        /** The kinds of its descriptors 0-2 ({@link #kinds}). */
        String kinds = "---";
        /** The spare's channel, on which it tells its exit status ({@link EarlyExit}), or -1. */
        int exitChannel = -1;
        /** What came on it with the spare's answer. */
        byte[] exitPrefix = new byte[0];
        /** The exit status its spare told, or null. */
        volatile String toldExit;
        private boolean cacheFinished;
        /** The spares after it were started. */
        boolean refilled;
        /** Counted in {@link Spares#due}: its {@code X} went before its spares were started. */
        boolean refillDue;

        /** Counts its use of the class-data cache, once. */
        synchronized void cacheFinished() {
            if (!cacheFinished) {
                cacheFinished = true;
                ExactWorker.this.cache.finished(this.cache, id);
            }
        }

        Run(long id) {
            this.id = id;
        }

        void send(byte type, byte[] payload) {
            try {
                writer.session(id, type, payload, 0, payload.length);
            } catch (IOException e) {
                channelBroken(e);
            }
        }
    }

    public ExactWorker(Options options, List<String> hostFeatures) {
        this.options = options;
        this.jvmOptions = options.jvmOptions;
        this.host = hostFeatures;
        this.mux = host.contains("mux");
        this.notices = host.contains("notices");
        this.fdsExt = host.contains("fds");
        this.signalsExt = host.contains("signals");
        this.writer = new ChunkWriter(new FileOutputStream(FileDescriptor.in), mux);
        this.java = ProcessHandle.current().info().command().orElse("java");
        this.cache = new ClassCache(this, options, java);
        this.spares = new Spares(this, options.spares);
    }

    /** Sends the hello and serves until ngd says quit or the channel ends; never returns. */
    public void serve() {
        String configured = System.getenv("NGW_COMMANDS");
        List<String> commands = configured == null || configured.isEmpty() ? List.of()
                : Arrays.asList(configured.split(","));
        if (commands.isEmpty()) {
            hello(null, "no commands: ngd names them in NGW_COMMANDS from the plugin's `commands`");
            exit(78);
        }
        hello(commands, null);
        spares.refill(Posix.raw(System.getProperty("user.dir")), workerEnv(), null);
        try {
            loop();
        } catch (IOException e) {
            log.println("ngw-java: channel: " + e.getMessage());
        }
        for (Run r : runs.values()) {
            hangup(r);
        }
        spares.stop();
        exit(0);
    }

    private Map<String, String> workerEnv() {
        Map<String, String> env = new LinkedHashMap<>();
        System.getenv().forEach((k, v) -> {
            if (!k.startsWith("NGW_")) {
                env.put(Posix.raw(k), Posix.raw(v));
            }
        });
        return env;
    }

    private void hello(List<String> commands, String error) {
        try {
            if (error != null) {
                ngw.wire.Hello.refuse(writer, error);
                return;
            }
            List<String> features = new ArrayList<>(List.of("interrupt", "fork"));
            for (String f : List.of("mux", "notices", "fds", "signals", "ctty")) {
                if (host.contains(f)) {
                    features.add(f);
                }
            }
            ngw.wire.Hello.ready(writer, commands, features, mux ? MAX_SESSIONS : 1, MAX_CHUNK, options.killGraceMs,
                    Map.of());
        } catch (IOException e) {
            exit(2);
        }
    }

    private void loop() throws IOException {
        while (true) {
            long start = input.offset();
            Chunk c = reader.read();
            if (c == null) {
                return;
            }
            byte type = c.type();
            if (type == Chunk.SELECT) {
                selected = Long.parseLong(c.text().trim());
                if (!runs.containsKey(selected) && !headers.containsKey(selected)) {
                    Run r = new Run(selected);
                    r.passed = input.take(start);
                    headers.put(selected, r);
                }
                continue;
            }
            if (!mux && (type == Chunk.ARG || type == Chunk.ENV || type == Chunk.DIR || type == Chunk.COMMAND)
                    && !headers.containsKey(selected)) {
                selected++;
                Run r = new Run(selected);
                r.passed = input.take(start);
                headers.put(selected, r);
            }
            switch (type) {
                case Chunk.ARG -> header().args.add(bytes(c));
                case Chunk.ENV -> env(header(), bytes(c));
                case Chunk.DIR -> header().cwd = bytes(c);
                case Chunk.COMMAND -> start(headers.remove(selected));
                case Chunk.STDIN -> stdin(c.payload());
                case Chunk.STDIN_EOF -> stdin(null);
                case Chunk.INTERRUPT -> interrupt(runs.get(selected), c.text());
                case Chunk.PING -> writer.control(Chunk.PONG, c.payload());
                case Chunk.QUIT -> {
                    quitting = true;
                    if (runs.isEmpty()) {
                        return;
                    }
                }
                default -> { }
            }
        }
    }

    /** A chunk's payload as a string of bytes ({@link Posix#raw}): passed on unchanged. */
    private static String bytes(Chunk c) {
        return new String(c.payload(), StandardCharsets.ISO_8859_1);
    }

    private Run header() {
        return headers.computeIfAbsent(selected, Run::new);
    }

    private static void env(Run r, String entry) {
        int eq = entry.indexOf('=');
        if (eq <= 0 || entry.indexOf('\0') >= 0) {
            return;
        }
        String name = entry.substring(0, eq);
        String value = entry.substring(eq + 1);
        switch (name) {
            case "NGW_UMASK" -> {
                try {
                    r.umask = Integer.parseInt(value, 8);
                } catch (NumberFormatException e) {
                    r.umask = -1;
                }
            }
            case "NGW_CLIENT_FDS" -> r.fdMap = value;
            case "NGW_CLIENT_PTY" -> r.ptyMap = value;
            case "NGW_SIGIGN" -> r.ignored = value.isEmpty() ? List.of() : Arrays.asList(value.split(","));
            default -> {
                if (!name.startsWith("NGW_") && !name.startsWith("NAILGUN_")) {
                    r.env.put(name, value);
                }
            }
        }
    }

    /** Marks the end of stdin in a session's stdin queue. */
    private static final byte[] STDIN_END = new byte[0];

    private void stdin(byte[] payload) {
        Run r = runs.get(selected);
        if (r != null && r.stdinWrite >= 0) {
            try {
                r.stdin.put(payload == null ? STDIN_END : payload);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
    }

    private void start(Run r) {
        if (r == null) {
            return;
        }
        runs.put(r.id, r);
        if (r.passed.length > 0 && r.fdMap != null && fdsExt) {
            String[] map = r.fdMap.split(",");
            for (int i = 0; i < r.passed.length; i++) {
                int target = i < map.length ? Integer.parseInt(map[i].trim()) : -1;
                if (target >= 0 && target < 3 && r.stdio[target] < 0) {
                    r.stdio[target] = r.passed[i];
                } else if (i == map.length && r.ptyMap != null && host.contains("ctty")) {
                    r.pty = r.passed[i];
                } else {
                    Posix.closeQuietly(r.passed[i]);
                }
            }
            if (r.pty >= 0) {
                // The pseudo-terminal stands for the client's terminal on these fds.
                for (String f : r.ptyMap.split(",")) {
                    int target = Integer.parseInt(f.trim());
                    if (target >= 0 && target < 3) {
                        Posix.closeQuietly(r.stdio[target]);
                        r.stdio[target] = Posix.dup(r.pty);
                    }
                }
                r.send(Chunk.TAKEN, "ctty".getBytes(StandardCharsets.US_ASCII));
            } else {
                r.send(Chunk.TAKEN, new byte[0]);
            }
        } else {
            for (int f : r.passed) {
                Posix.closeQuietly(f);
            }
            r.passed = new int[0];
        }
        if (r.cwd == null) {
            r.cwd = Posix.raw(System.getProperty("user.dir"));
        }
        launchers.execute(() -> launch(r));
    }

    /** Starts the session's process (a spare, else cold), then waits for it. */
    private void launch(Run r) {
        List<Integer> ours = new ArrayList<>();
        try {
            boolean relay = r.stdio[0] < 0 && r.stdio[1] < 0 && r.stdio[2] < 0;
            int[] outR = {-1, -1};
            if (relay) {
                int[] in = Posix.pipe();
                int[] out = Posix.pipe();
                int[] err = Posix.pipe();
                r.stdio[0] = in[0];
                r.stdio[1] = out[1];
                r.stdio[2] = err[1];
                r.stdinWrite = in[1];
                outR[0] = out[0];
                outR[1] = err[0];
            }
            for (int f : r.stdio) {
                if (f >= 0) {
                    ours.add(f);
                }
            }
            r.kinds = kinds(r.stdio);
            String why = spares.run(r);
            if (why != null) {
                notice("fallback", "ran cold: " + why, r.id);
                List<String> cds = new ArrayList<>();
                r.cache = cache.start(cds);
                List<String> argv = coldArgv(cds, r.args);
                String path = java();
                String ng = anchor();
                if (r.pty >= 0 && ng != null) {
                    // The JVM leads its session on the terminal: `ng` anchors its job (so
                    // that ^Z stops it) and execs it (docs/ngw.md 15.7).
                    argv.add(0, "ng:anchored");
                    path = Posix.raw(ng);
                }
                r.pid = Posix.spawn(new Posix.Spawn(path, argv, envList(r.env), r.cwd, r.stdio, -1,
                        r.pty >= 0 ? Posix.path(r.pty) : null));
            }
            for (int f : ours) {
                Posix.closeQuietly(f);
            }
            ours.clear();
            Posix.closeQuietly(r.pty);
            if (r.hungUp) {
                Posix.signal(-r.pid, Posix.SIGHUP);
            }
            if (relay) {
                r.relays = new Thread[] {
                    relayOut(r, outR[0], Chunk.STDOUT), relayOut(r, outR[1], Chunk.STDERR), relayIn(r),
                };
            }
            if (r.exitChannel >= 0) {
                launchers.execute(() -> {
                    try {
                        toldExit(r);
                    } catch (RuntimeException e) {
                        log.println("ngw-java: session " + r.id + ": " + e);
                    }
                });
            }
            waitFor(r);
            // Made from what this session recorded, now that its exit code has gone.
            cache.make(r.cache);
            // The next spare starts once this session is over, so that a JVM starting does
            // not take CPU from the session's own (two cores are common).
            refill(r);
        } catch (IOException | RuntimeException e) {
            for (int f : ours) {
                Posix.closeQuietly(f);
            }
            cache.abandoned(r.cache);
            synchronized (r) {
                if (r.refillDue && !r.refilled) {
                    refill(r);
                }
            }
            log.println("ngw-java: session " + r.id + ": " + e);
            r.send(Chunk.STDERR, ("ngw-java: cannot start the program: " + e.getMessage() + "\n")
                    .getBytes(StandardCharsets.UTF_8));
            end(r, "126\n");
        }
    }

    /**
     * The kinds of descriptors 0-2 a static initialiser can tell apart without reading or
     * writing them: {@code t} a terminal, {@code o} open and not a terminal, {@code -} closed.
     */
    static String kinds(int[] stdio) {
        StringBuilder b = new StringBuilder();
        for (int f : stdio) {
            b.append(f < 0 ? '-' : Posix.isTerminal(f) ? 't' : 'o');
        }
        return b.toString();
    }

    /**
     * {@code java [cache options] [JVM options] -cp CP MAIN ARGS} (or {@code -jar JAR ARGS}),
     * as bytes.
     */
    List<String> coldArgv(List<String> cacheOptions, List<String> args) {
        List<String> argv = new ArrayList<>();
        argv.add(java);
        argv.addAll(cacheOptions);
        argv.addAll(jvmOptions);
        if (options.jar != null) {
            argv.add("-jar");
            argv.add(options.jar);
        } else {
            argv.add("-cp");
            argv.add(String.join(":", options.classpath));
            argv.add(options.mainClass);
        }
        List<String> raw = new ArrayList<>(argv.stream().map(Posix::raw).toList());
        raw.addAll(args);
        return raw;
    }

    /** The {@code ng} that anchors a job on a terminal ({@code NGW_ANCHOR}, docs/ngw.md 15.7), or null. */
    static String anchor() {
        String ng = System.getenv("NGW_ANCHOR");
        return ng == null || ng.isEmpty() ? null : ng;
    }

    /** The {@code java} binary, as bytes. */
    String java() {
        return Posix.raw(java);
    }

    Options options() {
        return options;
    }

    ClassCache cache() {
        return cache;
    }

    static List<String> envList(Map<String, String> env) {
        List<String> list = new ArrayList<>(env.size());
        env.forEach((k, v) -> list.add(k + "=" + v));
        return list;
    }

    private Thread relayOut(Run r, int fd, byte type) {
        Thread t = new Thread(() -> {
            byte[] buf = new byte[64 * 1024];
            try {
                int n;
                while ((n = Posix.readSome(fd, buf)) > 0) {
                    if (!r.hungUp) {
                        r.send(type, Arrays.copyOf(buf, n));
                    }
                }
            } catch (IOException e) {
                log.println("ngw-java: session " + r.id + ": " + e.getMessage());
            } finally {
                Posix.closeQuietly(fd);
            }
        }, "ngw-relay-" + r.id);
        t.setDaemon(true);
        t.start();
        return t;
    }

    private Thread relayIn(Run r) {
        Thread t = new Thread(() -> {
            try {
                while (!r.ended) {
                    r.send(Chunk.SEND_INPUT, new byte[0]);
                    byte[] data = r.stdin.take();
                    if (data == STDIN_END) {
                        break;
                    }
                    Posix.writeAll(r.stdinWrite, data);
                }
            } catch (InterruptedException | IOException e) {
                // The program stopped reading (EPIPE) or the session ended.
            } finally {
                Posix.closeQuietly(r.stdinWrite);
            }
        }, "ngw-stdin-" + r.id);
        t.setDaemon(true);
        t.start();
        return t;
    }

    /**
     * Reads the exit status the session's spare tells ({@link EarlyExit}) and ends the session
     * with it; nothing if the channel ends without one (the waiter then ends it).
     */
    private void toldExit(Run r) {
        byte[] got = Arrays.copyOf(r.exitPrefix, 16);
        int n = r.exitPrefix.length;
        try {
            byte[] buf = new byte[16];
            while (n < got.length && (n == 0 || got[n - 1] != '\n')) {
                int k = Posix.readSome(r.exitChannel, buf);
                if (k <= 0) {
                    break;
                }
                k = Math.min(k, got.length - n);
                System.arraycopy(buf, 0, got, n, k);
                n += k;
            }
        } catch (IOException e) {
            n = 0;
        } finally {
            Posix.closeQuietly(r.exitChannel);
        }
        String text = new String(got, 0, n, StandardCharsets.US_ASCII);
        if (!text.matches("X[0-9]{1,3}\n")) {
            return;
        }
        String x = text.substring(1);
        r.toldExit = x;
        joinRelays(r);
        r.cacheFinished();
        notice("count", "exit-early", r.id);
        due(r);
        end(r, x);
        // The session is over for its client: the next spare starts now, while this JVM
        // tears itself down.
        refill(r);
    }

    /** Starts the spares for the sessions after {@code r}, once. */
    private void refill(Run r) {
        boolean due;
        synchronized (r) {
            if (r.refilled) {
                return;
            }
            r.refilled = true;
            due = r.refillDue;
        }
        spares.ended(r, due);
    }

    /** The session's {@code X} goes before its {@link #refill}: sessions meanwhile wait for it. */
    private void due(Run r) {
        synchronized (r) {
            if (r.refilled || r.refillDue) {
                return;
            }
            r.refillDue = true;
        }
        spares.due();
    }

    /** Waits for the relays of the session's output to reach their end; stops its input's. */
    private static void joinRelays(Run r) {
        for (Thread t : r.relays) {
            if (t.getName().startsWith("ngw-relay-")) {
                try {
                    t.join();
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            } else {
                t.interrupt();
            }
        }
    }

    private void waitFor(Run r) throws IOException {
        while (true) {
            Posix.Status s = Posix.waitFor(r.pid);
            if (s.stopped()) {
                if (signalsExt && !r.clientStopped) {
                    r.send(Chunk.STOPPED, Signals.name(s.signal()).getBytes(StandardCharsets.US_ASCII));
                }
                continue;
            }
            joinRelays(r);
            r.cacheFinished();
            String x;
            if (s.signaled()) {
                x = 128 + s.signal() + (signalsExt ? " " + Signals.name(s.signal()) + (s.core() ? " core" : "") : "")
                        + "\n";
            } else {
                x = s.code() + "\n";
            }
            String told = r.toldExit;
            if (told != null && !told.equals(x)) {
                log("session " + r.id + ": its JVM told exit status " + told.trim() + " but exited with "
                        + x.trim() + " (a race of its own between exits)");
            }
            due(r);
            end(r, x);
            return;
        }
    }

    private void end(Run r, String x) {
        synchronized (r) {
            if (r.ended) {
                return;
            }
            r.ended = true;
        }
        r.send(Chunk.EXIT, x.getBytes(StandardCharsets.US_ASCII));
        runs.remove(r.id);
        if (quitting && runs.isEmpty()) {
            spares.stop();
            exit(0);
        }
    }

    private void interrupt(Run r, String what) {
        if (r == null) {
            return;
        }
        if (what.equals("hangup")) {
            hangup(r);
            return;
        }
        String[] words = what.split(" ");
        if (words[0].equals("winsize")) {
            if (r.pid > 0) {
                Posix.signal(-r.pid, Posix.SIGWINCH);
            }
            return;
        }
        int sig = Signals.number(words[0]);
        if (sig <= 0 || r.pid <= 0) {
            return;
        }
        if (Signals.isStop(words[0])) {
            r.clientStopped = true;
        } else if (words[0].equals("SIGCONT")) {
            r.clientStopped = false;
        }
        boolean process = words.length > 1 && words[1].equals("process");
        Posix.signal(process ? r.pid : -r.pid, sig);
    }

    private void hangup(Run r) {
        r.hungUp = true;
        if (r.pid > 0) {
            Posix.signal(-r.pid, Posix.SIGHUP);
            Posix.signal(-r.pid, Signals.number("SIGCONT"));
        }
        Thread t = new Thread(() -> {
            try {
                Thread.sleep(options.killGraceMs);
            } catch (InterruptedException e) {
                return;
            }
            if (!r.ended && r.pid > 0) {
                Posix.signal(-r.pid, Posix.SIGKILL);
            }
        }, "ngw-grace-" + r.id);
        t.setDaemon(true);
        t.start();
    }

    void notice(String kind, String message, long session) {
        log.println("ngw-java: " + kind + ": " + message);
        if (!notices) {
            return;
        }
        Map<String, Object> n = new LinkedHashMap<>();
        n.put("kind", kind);
        n.put("message", message);
        if (session >= 0) {
            n.put("session", session);
        }
        try {
            writer.control(Chunk.NOTICE, Json.object(n).getBytes(StandardCharsets.UTF_8));
        } catch (IOException e) {
            channelBroken(e);
        }
    }

    void log(String message) {
        log.println("ngw-java: " + message);
    }

    private void channelBroken(IOException e) {
        log.println("ngw-java: channel: " + e.getMessage());
        spares.stop();
        exit(2);
    }

    static void exit(int status) {
        System.err.flush();
        Runtime.getRuntime().halt(status);
    }
}
