/**
 * The JVM worker with Nailgun's semantics: one JVM runs every session, each on threads of its
 * own, several at once with {@code mux} (docs/ngw.md §15.1). The reader thread owns the
 * channel's input: it assembles headers, starts sessions and routes their stdin and
 * interrupts; sessions write their own chunks through the shared {@link ChunkWriter}.
 *
 * <p>{@code System.exit}, {@code Runtime.exit} and {@code Runtime.halt} on a session's threads
 * end that session (the exit agent patched them to ask us first); on any other thread they
 * exit the JVM. When the classpath's files change, the worker says {@code stale}, retires, and
 * runs any session it still gets on a fresh class loader, so no session runs stale code.
 */
package ngw.shared;

import java.io.BufferedInputStream;
import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.io.PrintStream;
import java.net.MalformedURLException;
import java.net.URL;
import java.net.URLClassLoader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.SortedMap;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.locks.LockSupport;

import ngw.Fingerprint;
import ngw.NailSession;
import ngw.Options;
import ngw.boot.ExitHook;
import ngw.wire.Chunk;
import ngw.wire.ChunkReader;
import ngw.wire.ChunkWriter;
import ngw.wire.Json;

/** See the file comment. */
public final class SharedWorker implements NailSession.WorkerView {
    /** The largest chunk the worker accepts (its hello's {@code max_chunk}). */
    public static final int MAX_CHUNK = 16 * 1024 * 1024;
    /**
     * The channel's read buffer: a header (dozens of chunks, one per variable of the
     * client's environment) comes in one or two reads instead of two per chunk.
     */
    private static final int CHANNEL_BUFFER = 64 * 1024;
    /** Sessions the JIT warm-up runs as the worker starts. */
    private static final int WARM_SESSIONS = 400;
    /** Session threads kept waiting for a session, beyond the one reading the channel. */
    private static final int MAX_IDLE = 4;
    /** Sessions at once on one worker, with {@code mux}. */
    public static final int MAX_SESSIONS = 64;
    /** How often the loaded classes' files are checked for changes. */
    private static final long STALE_POLL_MS = 500;

    private final Options options;
    private final ChunkReader reader;
    private final ChunkWriter writer;
    private final boolean mux;
    private final boolean notices;
    private final Map<Long, Session> sessions = new ConcurrentHashMap<>();
    private final Map<Long, Header> headers = new HashMap<>();
    private final SortedMap<String, String> aliases = new TreeMap<>();
    private final Map<String, long[]> stats = new TreeMap<>();
    private final Fingerprint.Watch code;
    /** This worker only warms the JIT up: see {@link #startWarmUp}. */
    private final boolean warming;
    /** Session threads waiting for a session (the last one in first: its stack is warm). */
    private final ArrayDeque<SessionThread> idle = new ArrayDeque<>();
    private volatile boolean stale;
    private volatile boolean retiring;
    private volatile boolean quitting;
    private long selected;

    private static final class Header {
        final List<String> args = new ArrayList<>();
        /** The {@code E} chunks' payloads, decoded only if the program asks (see {@link Session#env}). */
        final List<byte[]> env = new ArrayList<>();
        final long at = Probe.ON ? System.nanoTime() : 0;
        String cwd;
    }

    public SharedWorker(Options options, InputStream channelIn, java.io.OutputStream channelOut,
            List<String> hostFeatures) {
        this(options, channelIn, channelOut, hostFeatures, false);
    }

    private SharedWorker(Options options, InputStream channelIn, java.io.OutputStream channelOut,
            List<String> hostFeatures, boolean warming) {
        this.warming = warming;
        this.options = options;
        this.reader = new ChunkReader(new BufferedInputStream(channelIn, CHANNEL_BUFFER), MAX_CHUNK);
        this.mux = hostFeatures.contains("mux");
        this.notices = hostFeatures.contains("notices");
        this.writer = new ChunkWriter(channelOut, mux);
        this.aliases.putAll(options.aliases);
        this.code = new Fingerprint.Watch(options.classpath, ngw.agent.ExitAgent.instrumentation());
    }

    /** The hello's commands: what ngd configured (NGW_COMMANDS), else the aliases. */
    private List<String> commands() {
        String configured = System.getenv("NGW_COMMANDS");
        List<String> list = new ArrayList<>();
        if (configured != null && !configured.isEmpty()) {
            list.addAll(Arrays.asList(configured.split(",")));
        }
        for (String a : aliases.keySet()) {
            if (!list.contains(a)) {
                list.add(a);
            }
        }
        return list;
    }

    /** Why a configured command cannot be served, or null. */
    private String unservable(List<String> commands) {
        if (options.mode != Options.Mode.NAILS) {
            return null;
        }
        for (String c : commands) {
            String cls = aliases.getOrDefault(c, c);
            try {
                Class.forName(cls, false, ClassLoader.getSystemClassLoader());
            } catch (ClassNotFoundException | LinkageError e) {
                return "command '" + c + "': no class '" + cls + "' on the classpath";
            }
        }
        return null;
    }

    /** Sends the hello and serves until ngd says quit or the channel ends; never returns. */
    public void serve() {
        Streams.install();
        if (!ExitHook.isPatched()) {
            hello(null, "System.exit cannot be trapped on this JVM (the ngw-java agent did not load; see the log)");
            exitWorker(78);
        }
        ExitHook.install(status -> trap(status), status -> trap(status));
        List<String> commands = commands();
        String bad = unservable(commands);
        if (bad != null) {
            hello(null, bad);
            exitWorker(78);
        }
        if (commands.isEmpty() && options.mode != Options.Mode.NAILS) {
            hello(null, "no commands: ngd names them in NGW_COMMANDS from the plugin's `commands`");
            exitWorker(78);
        }
        hello(commands, null);
        startStalePoller();
        new SessionThread(this::idle).run(this::lead);
        startWarmUp();
        while (true) {
            LockSupport.park(this);
        }
    }

    /**
     * The work of every session thread: it reads the channel until a session's {@code C}, then
     * hands the reading to a waiting thread and runs that session itself, so that nothing
     * stands between the {@code C} and the program. A thread is made to wait, when none does,
     * as this one takes over the reading, not once the {@code C} has come.
     */
    private void lead(SessionThread self) {
        synchronized (idle) {
            if (idle.isEmpty()) {
                idle.push(new SessionThread(this::idle));
            }
        }
        SessionStreams streams = new SessionStreams();
        Runnable session;
        try {
            session = readUntilSession(self, streams);
        } catch (IOException e) {
            Streams.workerErr().println("ngw-java: channel: " + e.getMessage());
            hangUpAll();
            exitWorker(2);
            return;
        }
        if (session == null) {
            hangUpAll();
            exitWorker(0);
            return;
        }
        SessionThread next;
        synchronized (idle) {
            next = idle.poll();
        }
        if (next == null) {
            // Every waiting thread has taken a session since this one took over.
            next = new SessionThread(this::idle);
        }
        next.run(this::lead);
        session.run();
    }

    /**
     * Runs {@link #WARM_SESSIONS} sessions of {@link WarmNail} through the dispatch path (the
     * header read and parsed, the session and its streams made, the jar check, the nail found
     * and called, the {@code X} written), on a worker of their own whose channel is a byte
     * array and a sink, on a session thread of their own: the JIT compiles that path now, as
     * the worker starts, rather than while the first hundreds of real sessions wait. Nothing
     * of it reaches ngd, the real worker's counters or its sessions.
     */
    private void startWarmUp() {
        java.io.ByteArrayOutputStream bytes = new java.io.ByteArrayOutputStream();
        ChunkWriter header = new ChunkWriter(bytes, false);
        try {
            for (int i = 0; i < WARM_SESSIONS; i++) {
                header.control(Chunk.SELECT, Integer.toString(i).getBytes(StandardCharsets.US_ASCII));
                header.control(Chunk.ARG, "warm".getBytes(StandardCharsets.US_ASCII));
                for (int e = 0; e < 40; e++) {
                    header.control(Chunk.ENV, ("NGW_WARM_" + e + "=/usr/local/bin:/usr/bin:/bin")
                            .getBytes(StandardCharsets.US_ASCII));
                }
                header.control(Chunk.DIR, "/".getBytes(StandardCharsets.US_ASCII));
                header.control(Chunk.COMMAND, WarmNail.class.getName().getBytes(StandardCharsets.US_ASCII));
            }
        } catch (IOException e) {
            return;
        }
        SharedWorker warm = new SharedWorker(options, new java.io.ByteArrayInputStream(bytes.toByteArray()),
                java.io.OutputStream.nullOutputStream(), List.of("mux"), true);
        new SessionThread(null).run(self -> {
            try {
                for (Runnable s = warm.readUntilSession(self, new SessionStreams()); s != null;
                        s = warm.readUntilSession(self, new SessionStreams())) {
                    s.run();
                }
            } catch (IOException e) {
                // A byte array does not fail.
            }
        });
    }

    /** The nail of the warm-up's sessions: it does nothing. */
    public static final class WarmNail {
        private WarmNail() {}

        /** Returns at once. */
        public static void nailMain(com.martiansoftware.nailgun.NGContext context) {}
    }

    /** Keeps a session thread whose session is over for a later one, up to {@link #MAX_IDLE}. */
    private boolean idle(SessionThread t) {
        synchronized (idle) {
            if (idle.size() >= MAX_IDLE) {
                return false;
            }
            idle.push(t);
            return true;
        }
    }

    private static void trap(int status) {
        Session s = Session.owner();
        if (s != null) {
            s.exitFromProgram(status);
        }
    }

    private void hello(List<String> commands, String error) {
        try {
            if (error != null) {
                ngw.wire.Hello.refuse(writer, error);
                return;
            }
            List<String> features = new ArrayList<>();
            features.add("interrupt");
            if (mux) {
                features.add("mux");
            }
            if (notices) {
                features.add("notices");
            }
            ngw.wire.Hello.ready(writer, commands, features, mux ? MAX_SESSIONS : 1, MAX_CHUNK, options.killGraceMs,
                    options.mode == Options.Mode.NAILS ? Map.of("class_names", true) : Map.of());
        } catch (IOException e) {
            exitWorker(2);
        }
    }

    /**
     * Reads and acts on chunks until one starts a session, on {@code self}, with {@code
     * streams}: returns that session's program, to run on this thread; null when the channel
     * ends or ngd says quit with no session running.
     */
    private Runnable readUntilSession(SessionThread self, SessionStreams streams) throws IOException {
        for (Chunk c = reader.read(); c != null; c = reader.read()) {
            byte[] payload = c.payload();
            switch (c.type()) {
                case Chunk.SELECT -> selected = parseId(c);
                case Chunk.ARG -> header().args.add(text(c));
                case Chunk.ENV -> header().env.add(payload);
                case Chunk.DIR -> header().cwd = text(c);
                case Chunk.COMMAND -> {
                    return start(selected, headers.remove(selected), text(c), self, streams);
                }
                case Chunk.STDIN -> withSession(s -> s.stdin(payload));
                case Chunk.STDIN_EOF -> withSession(Session::stdinEof);
                case Chunk.INTERRUPT -> {
                    int end = endCode(c.text());
                    if (end != NO_END) {
                        withSession(s -> s.hangup(options.killGraceMs, end));
                    }
                }
                case Chunk.PING -> writer.control(Chunk.PONG, c.payload());
                case Chunk.QUIT -> {
                    quitting = true;
                    if (sessions.isEmpty()) {
                        return null;
                    }
                }
                default -> { }
            }
        }
        return null;
    }

    private static final int NO_END = -2;

    /**
     * What an interrupt does to a session: a hangup ends it once its grace is over (-1);
     * SIGINT, SIGTERM and SIGHUP end it at once with 128+N, as they end a cold JVM; any other
     * signal is ignored ({@link #NO_END}), as a JVM ignores most.
     */
    private static int endCode(String interrupt) {
        return switch (interrupt.split(" ")[0]) {
            case "hangup" -> -1;
            case "SIGHUP" -> 129;
            case "SIGINT" -> 130;
            case "SIGTERM" -> 143;
            default -> NO_END;
        };
    }

    private long parseId(Chunk c) throws IOException {
        try {
            return Long.parseLong(c.text().trim());
        } catch (NumberFormatException e) {
            throw new IOException("bad session id '" + c.text() + "'");
        }
    }

    private static String text(Chunk c) {
        return new String(c.payload(), StandardCharsets.UTF_8);
    }

    private Header header() {
        return headers.computeIfAbsent(selected, k -> new Header());
    }

    private void withSession(java.util.function.Consumer<Session> f) {
        Session s = sessions.get(selected);
        if (s != null) {
            f.accept(s);
        }
    }

    /** Makes session {@code id}, with {@code streams}, and returns its program, to run on {@code thread}. */
    private Runnable start(long id, Header h, String command, SessionThread thread, SessionStreams streams) {
        if (h == null) {
            h = new Header();
        }
        Probe probe = warming ? null : Probe.start(h.at);
        if (probe != null) {
            probe.mark(Probe.Mark.COMMAND);
        }
        List<String> args = new ArrayList<>(options.leadingArgs);
        args.addAll(h.args);
        Session s = new Session(this, writer, id, args, h.env, h.cwd, command, streams, probe);
        if (probe != null) {
            probe.mark(Probe.Mark.MADE);
        }
        String cls = warming ? WarmNail.class.getName()
                : options.mode == Options.Mode.SHARED ? options.mainClass : aliases.getOrDefault(command, command);
        ClassLoader loader = loaderForSession();
        if (probe != null) {
            probe.mark(Probe.Mark.CHECKED);
        }
        count(cls, 1, 1);
        Runnable program = s.on(thread, () -> {
            if (probe != null) {
                probe.mark(Probe.Mark.RUN);
            }
            int code;
            try {
                code = Nails.run(s, cls, loader);
            } catch (Nails.NoSuchNail e) {
                s.err().println("ngw-java: " + e.getMessage());
                code = 127;
            }
            if (probe != null) {
                probe.mark(Probe.Mark.RETURNED);
            }
            s.exit(code);
        });
        sessions.put(id, s);
        return program;
    }

    private synchronized void count(String cls, long runs, long running) {
        long[] v = stats.computeIfAbsent(cls, k -> new long[2]);
        v[0] += runs;
        v[1] += running;
    }

    /**
     * The system class loader, or a fresh one over the classpath once the code is stale (a
     * jar changed, checked now; a class directory, checked by the poller within {@link
     * #STALE_POLL_MS}).
     */
    private ClassLoader loaderForSession() {
        if (!stale && code.jarsChanged() && !warming) {
            markStale();
        }
        if (!stale) {
            return ClassLoader.getSystemClassLoader();
        }
        List<URL> urls = new ArrayList<>();
        for (String e : options.classpath) {
            try {
                urls.add(new File(e).toURI().toURL());
            } catch (MalformedURLException ex) {
                // An entry that is not a path cannot hold classes.
            }
        }
        return new FreshLoader(urls.toArray(new URL[0]));
    }

    /** Loads the classpath anew, except the worker's own and the Nailgun API classes. */
    private static final class FreshLoader extends URLClassLoader {
        FreshLoader(URL[] urls) {
            super("ngw-fresh", urls, ClassLoader.getSystemClassLoader());
        }

        @Override
        protected Class<?> loadClass(String name, boolean resolve) throws ClassNotFoundException {
            if (name.startsWith("ngw.") || name.startsWith("com.martiansoftware.nailgun.")
                    || name.startsWith("com.facebook.nailgun.") || name.startsWith("java.")
                    || name.startsWith("javax.") || name.startsWith("jdk.") || name.startsWith("sun.")) {
                return super.loadClass(name, resolve);
            }
            synchronized (getClassLoadingLock(name)) {
                Class<?> c = findLoadedClass(name);
                if (c == null) {
                    try {
                        c = findClass(name);
                    } catch (ClassNotFoundException e) {
                        return super.loadClass(name, resolve);
                    }
                }
                if (resolve) {
                    resolveClass(c);
                }
                return c;
            }
        }
    }

    private void startStalePoller() {
        Thread t = new Thread(() -> {
            while (!stale) {
                try {
                    Thread.sleep(STALE_POLL_MS);
                } catch (InterruptedException e) {
                    return;
                }
                if (code.changed()) {
                    markStale();
                }
            }
        }, "ngw-stale");
        t.setDaemon(true);
        t.start();
    }

    private synchronized void markStale() {
        if (stale) {
            return;
        }
        stale = true;
        notice("stale", "the classpath changed on disk");
        retire("its classes are stale");
    }

    private void notice(String kind, String message) {
        Streams.workerErr().println("ngw-java: " + kind + ": " + message);
        if (!notices) {
            return;
        }
        Map<String, Object> n = new LinkedHashMap<>();
        n.put("kind", kind);
        n.put("message", message);
        try {
            writer.control(Chunk.NOTICE, Json.object(n).getBytes(StandardCharsets.UTF_8));
        } catch (IOException e) {
            channelBroken(e);
        }
    }

    /**
     * Takes no new session. With {@code notices}, ngd is told and sends {@code q} once this
     * worker's sessions are over (so a session already on its way is still served); without,
     * the worker exits once it has none.
     */
    @Override
    public synchronized void retire(String reason) {
        if (retiring) {
            return;
        }
        retiring = true;
        if (notices) {
            notice("retire", reason);
            return;
        }
        quitting = true;
        if (sessions.isEmpty()) {
            exitWorker(0);
        }
    }

    /** A session has written its {@code X}. */
    void sessionEnded(Session s) {
        sessions.remove(s.id());
        count(s.command(), 0, -1);
        if (s.probe() != null) {
            Streams.workerErr().println(s.probe().line(s.id()));
        }
        if (quitting && sessions.isEmpty()) {
            exitWorker(0);
        }
    }

    /** The channel failed: ngd is gone or the worker is being killed. */
    void channelBroken(IOException e) {
        Streams.workerErr().println("ngw-java: channel: " + e.getMessage());
        exitWorker(2);
    }

    private void hangUpAll() {
        for (Session s : sessions.values()) {
            s.hangup(0, -1);
        }
    }

    /** Exits the JVM, whatever thread asks. */
    private static void exitWorker(int status) {
        ExitHook.install(null, null);
        PrintStream err = Streams.workerErr();
        if (err != null) {
            err.flush();
        }
        Runtime.getRuntime().halt(status);
    }

    @Override
    public synchronized SortedMap<String, String> aliases() {
        return new TreeMap<>(aliases);
    }

    @Override
    public synchronized void addAlias(String name, String className) {
        aliases.put(name, className);
    }

    @Override
    public synchronized void removeAlias(String name) {
        aliases.remove(name);
    }

    @Override
    public boolean nailsByClassName() {
        return options.mode == Options.Mode.NAILS;
    }

    @Override
    public synchronized Map<String, long[]> stats() {
        Map<String, long[]> copy = new TreeMap<>();
        stats.forEach((k, v) -> copy.put(k, v.clone()));
        return copy;
    }

    @Override
    public PrintStream out() {
        return Streams.workerOut();
    }

    @Override
    public PrintStream err() {
        return Streams.workerErr();
    }

    @Override
    public InputStream in() {
        return Streams.workerIn();
    }
}
