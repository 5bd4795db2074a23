/**
 * A session's thread, started ahead of its session: a thread in a thread group of its own
 * that waits to be given a session's program. The worker keeps one ready, so creating a
 * thread and its group is off a session's path; the threads a program starts are created in
 * the same group, inherit the session, and are found there when the client goes.
 */
package ngw.shared;

import java.io.PrintStream;

import ngw.ExitSignal;

/** See the file comment. */
final class SessionThread {
    private final Group group = new Group();
    private final Thread thread;
    private Runnable program;

    SessionThread() {
        thread = new Thread(group, this::await, "main");
        thread.setDaemon(true);
        thread.start();
    }

    /** Runs {@code program} for {@code session} on this thread; once. */
    synchronized void run(Session session, Runnable program) {
        group.session = session;
        this.program = program;
        notifyAll();
    }

    ThreadGroup group() {
        return group;
    }

    private void await() {
        Runnable p;
        synchronized (this) {
            while (program == null) {
                try {
                    wait();
                } catch (InterruptedException e) {
                    // Only a session's hangup interrupts, and it has a program by then.
                }
            }
            p = program;
        }
        p.run();
    }

    /**
     * A session's threads: an uncaught exception is printed on the session's stderr.
     *
     * <p>A daemon group: up to JDK 18 a thread group stays in its parent's list of groups,
     * with everything it reaches (its session, the session's streams and environment), until
     * it is destroyed, and a daemon group is destroyed when its last thread ends. (From JDK 19
     * a parent holds its groups weakly and this flag does nothing.)
     */
    private static final class Group extends ThreadGroup {
        volatile Session session;

        @SuppressWarnings("removal")
        Group() {
            super("ngw-session");
            setDaemon(true);
        }

        @Override
        public void uncaughtException(Thread t, Throwable e) {
            if (e instanceof ExitSignal) {
                return;
            }
            Session s = session;
            PrintStream target = s == null || s.ended() ? Streams.workerErr() : s.err();
            target.print("Exception in thread \"" + t.getName() + "\" ");
            e.printStackTrace(target);
        }
    }
}
