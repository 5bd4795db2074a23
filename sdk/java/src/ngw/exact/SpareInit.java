/**
 * A spare's initialisation ahead: it runs the main class's static initialisers (and those of
 * the classes they initialise) before its session arrives, in the environment, directory,
 * umask and ignored signals the session will have (the worker only hands it a session that
 * matches them exactly), and nothing of {@code main}.
 *
 * <p>Only what a session could not tell from a cold run may happen. The main class is
 * initialised ({@code Class.forName(name, true, loader)}) on a thread of its own, named
 * {@code main} and in the main thread's group, confined by {@link Guard}: a call with an
 * effect outside the JVM (writing a file, starting a process, touching descriptors 0-2, ...)
 * kills that thread before it happens. Descriptors 0-2 are sentinels meanwhile: a pipe
 * holding one byte and then its end as standard input (a read takes the byte: {@code
 * FIONREAD} on fd 0 then says 0), and pipes the spare holds the read ends of as standard
 * output and error (a write leaves bytes there, after {@code System.out} and {@code
 * System.err} are flushed). The spare has no controlling terminal (it leads a session of its
 * own). It is not clean, and never takes a session, when the guard stopped the thread, the
 * initialisation threw, took longer than {@link #LIMIT_MS}, left a new thread running, or a sentinel shows a read or a write; the worker then stops initialising that
 * program ahead ({@link Ahead}). A clean spare puts its own descriptors back and waits.
 */
package ngw.exact;

import java.io.File;
import java.io.IOException;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;

/** See the file comment. */
final class SpareInit {
    private SpareInit() {}

    /** The longest an initialisation ahead may take. */
    static final long LIMIT_MS = 30_000;

    /** How it went: {@link Outcome#CLEAN}, or why not, and whether that is the program's doing. */
    record Outcome(boolean clean, boolean program, String why) {
        static final Outcome CLEAN = new Outcome(true, false, null);

        /** The program's initialisation cannot go ahead exactly. */
        static Outcome notExact(String why) {
            return new Outcome(false, true, why);
        }

        /** This system cannot run the initialisation guarded. */
        static Outcome unguarded(String why) {
            return new Outcome(false, false, why);
        }
    }

    /** Initialises {@code c} guarded, on sentinel descriptors; see the file comment. */
    static Outcome run(Class<?> c) throws IOException, InterruptedException {
        if (!Guard.supported()) {
            return Outcome.unguarded("the guard needs Linux on x86-64");
        }
        long[] program = Guard.program(ProcessHandle.current().pid());
        int[] saved = {Posix.dup(0), Posix.dup(1), Posix.dup(2)};
        int[] in = Posix.pipe();
        int[] out = Posix.pipe();
        int[] err = Posix.pipe();
        Posix.writeAll(in[1], new byte[] {'\n'});
        Posix.closeQuietly(in[1]);
        Posix.dup2(in[0], 0);
        Posix.dup2(out[1], 1);
        Posix.dup2(err[1], 2);
        for (int f : new int[] {in[0], out[1], err[1]}) {
            Posix.closeQuietly(f);
        }
        ThreadGroup group = Thread.currentThread().getThreadGroup();
        Set<Thread> before = new HashSet<>(Thread.getAllStackTraces().keySet());
        AtomicInteger tid = new AtomicInteger();
        AtomicReference<Throwable> thrown = new AtomicReference<>();
        AtomicReference<String> unguarded = new AtomicReference<>();
        Thread t = new Thread(group, () -> {
            tid.set(Posix.threadId());
            try {
                Posix.confineThread(program);
            } catch (IOException e) {
                unguarded.set(e.getMessage());
                return;
            }
            try {
                Class.forName(c.getName(), true, c.getClassLoader());
            } catch (Throwable e) {
                thrown.set(e);
            }
        }, "main");
        t.start();
        long deadline = System.nanoTime() + LIMIT_MS * 1_000_000;
        while (true) {
            t.join(10);
            if (!t.isAlive()) {
                break;
            }
            int id = tid.get();
            // A thread that ends is not alive before its task goes; one the guard killed
            // stays alive to the JVM.
            if (id > 0 && !new File("/proc/self/task/" + id).exists() && t.isAlive()) {
                // The guard ended the thread; the JVM may hold its locks: nothing more here.
                return Outcome.notExact("initialising it did what only a session may (the guard stopped it: "
                        + "a write to a file or descriptors 0-2, a read of stdin, a process, a socket, ...)");
            }
            if (System.nanoTime() > deadline) {
                return Outcome.notExact("initialising it took longer than " + LIMIT_MS / 1000 + " s");
            }
        }
        if (unguarded.get() != null) {
            restore(saved, out, err);
            return Outcome.unguarded("the guard could not be installed: " + unguarded.get());
        }
        if (thrown.get() != null) {
            return Outcome.notExact("initialising it threw " + thrown.get());
        }
        System.out.flush();
        System.err.flush();
        List<String> started = new ArrayList<>();
        for (Thread x : Thread.getAllStackTraces().keySet()) {
            // Any new thread: one the thread started is confined by the guard for life.
            if (x != t && !before.contains(x) && x.isAlive()) {
                started.add(x.getName());
            }
        }
        if (!started.isEmpty()) {
            return Outcome.notExact("initialising it started threads " + started);
        }
        if (Posix.pending(0) != 1) {
            return Outcome.notExact("initialising it read its standard input");
        }
        if (Posix.pending(out[0]) > 0) {
            return Outcome.notExact("initialising it wrote to its standard output");
        }
        if (Posix.pending(err[0]) > 0) {
            return Outcome.notExact("initialising it wrote to its standard error");
        }
        restore(saved, out, err);
        return Outcome.CLEAN;
    }

    /** The spare's own descriptors 0-2 again; the sentinels closed. */
    private static void restore(int[] saved, int[] out, int[] err) {
        for (int i = 0; i < 3; i++) {
            Posix.dup2(saved[i], i);
            Posix.closeQuietly(saved[i]);
        }
        Posix.closeQuietly(out[0]);
        Posix.closeQuietly(err[0]);
    }
}
