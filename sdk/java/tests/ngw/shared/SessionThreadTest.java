package ngw.shared;

/**
 * A session's thread group does not outlive its threads: after many sessions' programs have
 * ended, the worker's thread group holds no more groups than before (up to JDK 18 a group
 * that is never destroyed stays in its parent's list, and with it its session; from JDK 19
 * a parent holds its groups weakly, so an ended session's group goes at the next
 * collection).
 */
public class SessionThreadTest {
    public static void main(String[] args) throws Exception {
        ThreadGroup parent = Thread.currentThread().getThreadGroup();
        int before = parent.activeGroupCount();
        int n = 500;
        java.util.concurrent.CountDownLatch done = new java.util.concurrent.CountDownLatch(n);
        for (int i = 0; i < n; i++) {
            new SessionThread(null).run(t -> done.countDown());
        }
        done.await();
        long deadline = System.nanoTime() + 10_000_000_000L;
        int after = parent.activeGroupCount();
        while (after > before && System.nanoTime() < deadline) {
            System.gc();
            Thread.sleep(10);
            after = parent.activeGroupCount();
        }
        if (after > before) {
            throw new AssertionError(after - before + " of " + n + " session thread groups left after their programs ended");
        }
        System.out.println("SessionThreadTest: ok (" + n + " sessions, " + before + " -> " + after + " groups)");
    }
}
