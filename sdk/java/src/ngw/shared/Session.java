/**
 * One session in the shared JVM: its header, its streams, the thread group its program runs
 * in, its single exit, and the client's connection.
 *
 * <p>The program runs on a thread of its own, in a thread group of its own, so that every
 * thread it starts inherits the session (for the standard streams and the exit trap) and can
 * be interrupted when the client goes. States: running until the first exit (the program's
 * return, {@code exit}, {@code System.exit}, an uncaught exception, or the hangup grace running
 * out), then ended: the {@code X} is written once and later output is dropped.
 */
package ngw.shared;

import java.io.IOException;
import java.io.InputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;

import ngw.ExitSignal;
import ngw.NailSession;
import ngw.wire.Chunk;
import ngw.wire.ChunkWriter;

/** See the file comment. */
public final class Session implements NailSession {
    private static final InheritableThreadLocal<Session> CURRENT = new InheritableThreadLocal<>();

    /** The session of the calling thread, or null for the worker's own threads. */
    public static Session current() {
        Session s = CURRENT.get();
        return s == null || s.ended ? null : s;
    }

    /** The session of the calling thread, ended or not. */
    static Session owner() {
        return CURRENT.get();
    }

    private enum State { RUNNING, ENDED }

    private final SharedWorker worker;
    private final ChunkWriter writer;
    private final long id;
    private final String[] args;
    private final List<byte[]> rawEnv;
    private Properties env;
    private final String cwd;
    private final String command;
    private final SessionOutput outStream;
    private final SessionOutput errStream;
    private final PrintStream out;
    private final PrintStream err;
    private final SessionInput in;
    private SessionThread thread;
    private final Map<Object, Runnable> disconnects = new LinkedHashMap<>();
    private final Map<Object, Runnable> heartbeats = new LinkedHashMap<>();
    private volatile State state = State.RUNNING;
    private volatile boolean ended;
    private volatile boolean connected = true;
    private Thread heartbeat;
    private final Probe probe;

    Session(SharedWorker worker, ChunkWriter writer, long id, List<String> args, List<byte[]> env, String cwd,
            String command, SessionStreams streams, Probe probe) {
        this.worker = worker;
        this.probe = probe;
        this.writer = writer;
        this.id = id;
        this.args = args.toArray(new String[0]);
        this.rawEnv = env;
        this.cwd = cwd;
        this.command = command;
        this.outStream = streams.outStream;
        this.errStream = streams.errStream;
        this.out = streams.out;
        this.err = streams.err;
        this.in = streams.in;
        streams.bind(this, () -> writer.session(id, Chunk.SEND_INPUT, new byte[0], 0, 0));
    }

    /**
     * Binds this session to {@code thread}, a thread of its own in a group of its own, and
     * returns {@code program} as that thread runs it (with this session as its own).
     */
    Runnable on(SessionThread thread, Runnable program) {
        this.thread = thread;
        thread.bind(this);
        return () -> {
            CURRENT.set(this);
            program.run();
        };
    }

    long id() {
        return id;
    }

    /** The session's timestamps, or null when probes are off. */
    Probe probe() {
        return probe;
    }

    SessionOutput outStream() {
        return outStream;
    }

    SessionOutput errStream() {
        return errStream;
    }

    boolean ended() {
        return state == State.ENDED;
    }

    /** Writes output for this session unless it has ended. */
    synchronized void output(byte type, byte[] b, int off, int len) {
        if (state != State.RUNNING) {
            return;
        }
        try {
            writer.session(id, type, b, off, len);
        } catch (IOException e) {
            worker.channelBroken(e);
        }
    }

    /** The program's exit: the session ends with {@code code} unless it has ended already. */
    @Override
    public void exit(int code) {
        synchronized (this) {
            if (state != State.RUNNING) {
                return;
            }
            out.flush();
            err.flush();
            state = State.ENDED;
            ended = true;
            try {
                byte[] x = (code + "\n").getBytes(StandardCharsets.US_ASCII);
                writer.session(id, Chunk.EXIT, x, 0, x.length);
            } catch (IOException e) {
                worker.channelBroken(e);
            }
            if (probe != null) {
                probe.mark(Probe.Mark.EXITED);
            }
        }
        in.end();
        stopHeartbeats();
        worker.sessionEnded(this);
    }

    /** {@code System.exit} or {@code Runtime.halt} on one of this session's threads. */
    void exitFromProgram(int status) {
        exit(status);
        throw new ExitSignal(status);
    }

    void stdin(byte[] payload) {
        in.data(payload);
    }

    void stdinEof() {
        in.end();
    }

    /**
     * The client has gone, or asked the command to end (a forwarded SIGINT, SIGTERM or
     * SIGHUP): {@code isClientConnected()} turns false, the disconnect listeners run, stdin
     * ends and the session's threads are interrupted. With {@code endCode} ≥ 0 the session
     * ends at once with it (as a cold JVM ends on that signal). A session that has not ended
     * {@code graceMs} later is ended by the worker with 129; if any of its threads still
     * runs then, the worker retires: those threads stay in this JVM, so it takes no more
     * sessions.
     */
    void hangup(long graceMs, int endCode) {
        List<Runnable> listeners;
        synchronized (this) {
            if (!connected) {
                return;
            }
            connected = false;
            listeners = List.copyOf(disconnects.values());
        }
        in.end();
        Runnable notify = () -> {
            CURRENT.set(this);
            for (Runnable l : listeners) {
                try {
                    l.run();
                } catch (RuntimeException | Error e) {
                    if (!(e instanceof ExitSignal)) {
                        Streams.workerErr().println("ngw-java: a disconnect listener failed: " + e);
                    }
                }
            }
        };
        thread.spawnFor(this, notify, "ngw-hangup-" + id, true);
        if (endCode >= 0) {
            exit(endCode);
        }
        Thread grace = new Thread(SessionThread.workerGroup(), () -> {
            try {
                Thread.sleep(graceMs);
            } catch (InterruptedException e) {
                return;
            }
            if (!ended()) {
                exit(129);
            }
            if (thread.threadsLeft(this)) {
                worker.retire("a session's threads went on " + graceMs + " ms after its client left");
            }
        }, "ngw-grace-" + id);
        grace.setDaemon(true);
        grace.start();
    }

    @Override
    public String[] args() {
        return args.clone();
    }

    @Override
    public String command() {
        return command;
    }

    /**
     * The client's environment, from its {@code E} chunks, decoded at the first call (most
     * programs never ask); the worker's own {@code NGW_*} variables left out.
     */
    @Override
    public synchronized Properties env() {
        if (env == null) {
            env = new Properties();
            for (byte[] e : rawEnv) {
                put(env, new String(e, StandardCharsets.UTF_8));
            }
        }
        return env;
    }

    private static void put(Properties env, String entry) {
        int eq = entry.indexOf('=');
        if (eq <= 0 || entry.indexOf('\0') >= 0) {
            return;
        }
        String name = entry.substring(0, eq);
        if (name.startsWith("NGW_")) {
            return;
        }
        env.setProperty(name, entry.substring(eq + 1));
    }

    @Override
    public String workingDirectory() {
        return cwd;
    }

    @Override
    public InputStream in() {
        return in;
    }

    @Override
    public PrintStream out() {
        return out;
    }

    @Override
    public PrintStream err() {
        return err;
    }

    @Override
    public boolean isClientConnected() {
        return connected;
    }

    @Override
    public synchronized Runnable onDisconnect(Object key, Runnable listener) {
        if (!connected) {
            listener.run();
        } else {
            disconnects.put(key, listener);
        }
        return () -> removeDisconnect(key);
    }

    @Override
    public synchronized void removeDisconnect(Object key) {
        disconnects.remove(key);
    }

    @Override
    public synchronized void removeAllDisconnects() {
        disconnects.clear();
    }

    @Override
    public synchronized void onHeartbeat(Object key, Runnable beat) {
        heartbeats.put(key, beat);
        if (heartbeat == null) {
            heartbeat = thread.spawnFor(this, this::beat, "ngw-heartbeat-" + id, false);
        }
    }

    @Override
    public synchronized void removeHeartbeat(Object key) {
        heartbeats.remove(key);
    }

    private void beat() {
        while (connected && !ended()) {
            try {
                Thread.sleep(1000);
            } catch (InterruptedException e) {
                return;
            }
            List<Runnable> beats;
            synchronized (this) {
                beats = List.copyOf(heartbeats.values());
            }
            for (Runnable b : beats) {
                if (connected && !ended()) {
                    b.run();
                }
            }
        }
    }

    private synchronized void stopHeartbeats() {
        if (heartbeat != null) {
            heartbeat.interrupt();
        }
    }

    @Override
    public WorkerView worker() {
        return worker;
    }
}
