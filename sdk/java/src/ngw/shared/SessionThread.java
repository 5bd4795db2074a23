/**
 * A session's thread: a thread in a thread group of its own that waits to be given its work.
 * Its work is to read the channel until a session's {@code C} and then run that session (the
 * worker's {@code lead}); the threads a program starts are created in the same group,
 * inherit the session, and are found there when the client goes.
 *
 * <p>States: waiting (for work), working, then either waiting again or ended. A thread whose
 * session is over waits again, for a later session, only when nothing of that session is
 * left on it: no other thread or group in its group, the group's limits as they were, and
 * its thread-local variables, interrupt, name, priority, context class loader and uncaught
 * exception handler set back to a new thread's ({@link ngw.boot.ThreadState} clears the
 * thread-local variables); otherwise it ends, and the next session gets a new thread. A new
 * thread costs a session hundreds of microseconds (its stack is mapped, and unmapped when it
 * ends).
 */
package ngw.shared;

import java.io.PrintStream;
import java.util.function.Consumer;

import ngw.ExitSignal;
import ngw.boot.ThreadState;

/** See the file comment. */
final class SessionThread {
    /** Takes a thread that waits for work again; false when it should end instead. */
    interface Idle {
        boolean offer(SessionThread t);
    }

    private enum State { WAITING, WORKING, ENDED }

    private final Group group = new Group();
    private final Thread thread;
    private final Idle idle;
    private final ClassLoader loader;
    private final int priority;
    private final int maxPriority;
    private State state = State.WAITING;
    private Consumer<SessionThread> work;

    /** A thread that waits for work; with {@code idle} null, it ends after its first. */
    SessionThread(Idle idle) {
        this.idle = idle;
        thread = new Thread(group, this::loop, "main");
        thread.setDaemon(true);
        loader = thread.getContextClassLoader();
        priority = thread.getPriority();
        maxPriority = group.getMaxPriority();
        thread.start();
    }

    /** Runs {@code work} on this thread, given this thread; once per wait. */
    synchronized void run(Consumer<SessionThread> work) {
        if (state != State.WAITING || this.work != null) {
            throw new IllegalStateException("session thread is " + state);
        }
        this.work = work;
        notifyAll();
    }

    /** The session whose program this thread runs, for its uncaught exceptions. */
    void bind(Session session) {
        synchronized (group) {
            group.session = session;
        }
    }

    /**
     * Starts a daemon thread named {@code name} that runs {@code r} in {@code session}'s group
     * while that group is still the session's (so that it counts among its threads), else in
     * the worker's group; with {@code interrupt}, also interrupts the session's threads.
     */
    Thread spawnFor(Session session, Runnable r, String name, boolean interrupt) {
        synchronized (group) {
            boolean own = group.session == session;
            Thread t;
            try {
                t = new Thread(own ? group : Group.root(), r, name);
            } catch (IllegalThreadStateException e) {
                // The group is gone with its last thread (a daemon group, up to JDK 18).
                t = new Thread(Group.root(), r, name);
                own = false;
            }
            t.setDaemon(true);
            t.start();
            if (own && interrupt) {
                group.interrupt();
            }
            return t;
        }
    }

    /** The worker's own thread group, for the worker's threads a session thread starts. */
    static ThreadGroup workerGroup() {
        return Group.root();
    }

    /** Whether any thread of {@code session} still runs. */
    boolean threadsLeft(Session session) {
        synchronized (group) {
            return group.session == session && group.activeCount() > 0;
        }
    }

    private void loop() {
        while (true) {
            Consumer<SessionThread> w = take();
            w.accept(this);
            if (!reset() || !idle.offer(this)) {
                end();
                return;
            }
        }
    }

    private synchronized Consumer<SessionThread> take() {
        while (work == null) {
            try {
                wait();
            } catch (InterruptedException e) {
                // Only a session's hangup interrupts, and it is over by the time we wait.
            }
        }
        Consumer<SessionThread> w = work;
        work = null;
        state = State.WORKING;
        // An interrupt meant for the session this thread ran before, sent as it ended.
        Thread.interrupted();
        return w;
    }

    private synchronized void end() {
        state = State.ENDED;
    }

    /**
     * Sets this thread back to a new one's state; false when it cannot be. The group keeps
     * its session while any of its threads may still run, so that the session's hangup
     * reaches them and its uncaught exceptions are its own.
     */
    @SuppressWarnings("removal")
    private boolean reset() {
        synchronized (group) {
            if (idle == null || group.activeCount() != 1 || group.activeGroupCount() != 0
                    || group.getMaxPriority() != maxPriority || !group.isDaemon() || !ThreadState.clear(thread)) {
                return false;
            }
            group.session = null;
        }
        Thread.interrupted();
        thread.setUncaughtExceptionHandler(null);
        thread.setContextClassLoader(loader);
        if (thread.getPriority() != priority) {
            thread.setPriority(priority);
        }
        if (!"main".equals(thread.getName())) {
            thread.setName("main");
        }
        synchronized (this) {
            state = State.WAITING;
        }
        return true;
    }

    /**
     * A session's threads: an uncaught exception is printed on the session's stderr.
     *
     * <p>A daemon group: up to JDK 18 a thread group stays in its parent's list of groups,
     * with everything it reaches, until it is destroyed, and a daemon group is destroyed when
     * its last thread ends. (From JDK 19 a parent holds its groups weakly and this flag does
     * nothing.) A group whose thread waits for another session holds no session meanwhile.
     */
    private static final class Group extends ThreadGroup {
        volatile Session session;

        @SuppressWarnings("removal")
        Group() {
            super(root(), "ngw-session");
            setDaemon(true);
        }

        /**
         * The worker's own group: a session thread makes others (the next one to read, a
         * hangup's helpers), and their groups are siblings of its group, never children (a
         * group's interrupt and count reach its children).
         */
        static ThreadGroup root() {
            ThreadGroup g = Thread.currentThread().getThreadGroup();
            while (g instanceof Group) {
                g = g.getParent();
            }
            return g;
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
