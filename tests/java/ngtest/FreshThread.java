package ngtest;

import java.io.FileWriter;
import java.io.IOException;

/**
 * Prints what its thread holds when `main` starts (thread-local values, name, priority,
 * interrupt, context class loader, uncaught exception handler), then changes all of it, and
 * appends its thread's id to the file named by its argument. Run several times in a row, every
 * run prints what a new `main` thread holds, as under cold `java`.
 */
public class FreshThread {
    private static final ThreadLocal<String> LOCAL = new ThreadLocal<>();
    private static final InheritableThreadLocal<String> INHERITED = new InheritableThreadLocal<>();

    public static void main(String[] args) throws IOException {
        Thread t = Thread.currentThread();
        System.out.println("local=" + LOCAL.get() + " inherited=" + INHERITED.get());
        System.out.println("name=" + t.getName() + " priority=" + t.getPriority() + " interrupted=" + t.isInterrupted());
        System.out.println("context loader is the system's: " + (t.getContextClassLoader() == ClassLoader.getSystemClassLoader()));
        System.out.println("no handler of its own: " + (t.getUncaughtExceptionHandler() instanceof ThreadGroup));
        LOCAL.set("left by an earlier run");
        INHERITED.set("left by an earlier run");
        t.setName("renamed");
        t.setPriority(Thread.MIN_PRIORITY);
        t.setContextClassLoader(new ClassLoader(null) {});
        t.setUncaughtExceptionHandler((thread, e) -> { });
        try (FileWriter w = new FileWriter(args[0], true)) {
            w.write(t.getId() + "\n");
        }
        t.interrupt();
    }
}
