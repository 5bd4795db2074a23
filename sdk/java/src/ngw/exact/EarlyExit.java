/**
 * A spare's exit status, told to the worker as soon as it is final and the session can no
 * longer write to its client's descriptors, so that the client has its exit code before the
 * JVM tears itself down (stopping its threads, unmapping its heap and code: about half of a
 * trivial program's session).
 *
 * <p>The spare keeps its channel to the worker on a close-on-exec descriptor numbered {@link
 * #CHANNEL_MIN} or above, and registers a task that runs after every shutdown hook (the
 * application's, the console's and {@code File.deleteOnExit}'s: {@link
 * ngw.boot.ExitHook#last}), on the thread that ran them. The status is final there when that
 * thread is the one {@code DestroyJavaVM} runs them on, at the end of {@code main} once every
 * non-daemon thread has ended (0, or 1 after an uncaught exception, as the {@code java}
 * launcher has it), or a thread that called {@code Runtime.exit(n)} (the agent's patch reports
 * its {@code n} first: {@code System.exit}). The task then points descriptors 0-2 at {@code
 * /dev/null}, writes {@code X<status>\n} on the channel and closes it. Nothing of the program
 * runs after that, but daemon threads (which a cold JVM stops at a moment of its own, and
 * whose late output is a race there too); the JVM goes on to exit with that status.
 *
 * <p>Any other end (a signal that kills it, {@code Runtime.halt}, a terminating signal the JVM
 * handles, a crash, a hook that never returns) sends nothing: the worker then reports what
 * {@code waitpid} says, as for a cold session.
 */
package ngw.exact;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/** See the file comment. */
final class EarlyExit {
    /** The channel's lowest descriptor number while the program runs. */
    static final int CHANNEL_MIN = 1000;

    private EarlyExit() {}

    /** The status each thread last passed to {@code Runtime.exit}. */
    private static final Map<Thread, Integer> EXITS = new ConcurrentHashMap<>();
    private static volatile int channel = -1;
    /** 0 once {@code main} has returned, 1 once it has thrown; -1 before. */
    private static volatile int mainStatus = -1;
    /** Which of descriptors 0-2 the session has open. */
    private static volatile boolean[] open = {false, false, false};

    /** Registers the task; false if this JVM cannot (no agent, or a JDK that refuses). */
    static boolean arm() {
        if (!ngw.boot.ExitHook.isPatched()) {
            return false;
        }
        ngw.boot.ExitHook.install(status -> EXITS.put(Thread.currentThread(), status), null);
        if (!ngw.boot.ExitHook.last(EarlyExit::shutdown)) {
            return false;
        }
        // What the task runs, run once now: the first walk of a stack loads and links its
        // machinery, milliseconds that would otherwise come before the client's exit code.
        status();
        try {
            Posix.closeQuietly(Posix.openDevNull());
            // The kernel grows a process's descriptor table to hold a number this high, and
            // in a process of many threads waits for an RCU grace period to do it
            // (milliseconds): done here, the session's own copy of the channel finds the
            // table grown.
            Posix.closeQuietly(Posix.dupAbove(0, CHANNEL_MIN));
        } catch (IOException e) {
            return false;
        }
        return true;
    }

    /** Keeps {@code fd} (the channel) for the status, out of the program's way; closes {@code fd}. */
    static void keep(int fd, int[] stdio) {
        try {
            channel = Posix.dupAbove(fd, CHANNEL_MIN);
        } catch (IOException e) {
            channel = -1;
        }
        open = new boolean[] {stdio[0] >= 0, stdio[1] >= 0, stdio[2] >= 0};
        Posix.closeQuietly(fd);
    }

    /** {@code main} returned ({@code threw} false) or threw. */
    static void mainEnded(boolean threw) {
        mainStatus = threw ? 1 : 0;
    }

    /** The last shutdown task: see the file comment. */
    private static void shutdown() {
        int ch = channel;
        if (ch < 0) {
            return;
        }
        int status = status();
        if (status < 0) {
            return;
        }
        channel = -1;
        try {
            int nul = Posix.openDevNull();
            for (int i = 0; i < 3; i++) {
                if (open[i]) {
                    Posix.dup2(nul, i);
                }
            }
            Posix.closeQuietly(nul);
            Posix.writeAll(ch, ("X" + status + "\n").getBytes(StandardCharsets.US_ASCII));
        } catch (IOException | RuntimeException e) {
            // The worker reads the end of the channel and waits for the process instead.
        }
        Posix.closeQuietly(ch);
    }

    /** The status this shutdown ends with, if it is known here; else -1. */
    private static int status() {
        List<String> frames = StackWalker.getInstance()
                .walk(s -> s.map(f -> f.getClassName() + "." + f.getMethodName()).limit(12).toList());
        int i = frames.indexOf("java.lang.Shutdown.runHooks");
        if (i < 0 || i + 1 >= frames.size()) {
            return -1;
        }
        String by = frames.get(i + 1);
        if (by.equals("java.lang.Shutdown.shutdown")) {
            // DestroyJavaVM, after main and every non-daemon thread.
            return mainStatus;
        }
        if (by.equals("java.lang.Shutdown.exit") && i + 2 < frames.size()
                && frames.get(i + 2).equals("java.lang.Runtime.exit")) {
            Integer n = EXITS.get(Thread.currentThread());
            return n == null ? -1 : n;
        }
        return -1;
    }
}
