/**
 * The one class the exit agent puts on the boot class path.
 *
 * <p>{@link ngw.agent.ExitAgent} patches {@code java.lang.Runtime.exit(int)} and {@code
 * Runtime.halt(int)} to call {@link #exit} and {@link #halt} first. With no handler installed
 * both return at once and the JVM exits as usual; the worker installs a handler that ends the
 * calling session instead, by throwing, and lets every other caller through.
 *
 * <p>{@link #last} runs a task after the JVM's own shutdown hooks, in the last of {@code
 * java.lang.Shutdown}'s slots (the agent opens {@code java.lang} to this class's module alone).
 */
package ngw.boot;

import java.util.function.IntConsumer;

/** Called first by {@code Runtime.exit} and {@code Runtime.halt} once the agent has run. */
public final class ExitHook {
    private static volatile IntConsumer exitHandler;
    private static volatile IntConsumer haltHandler;
    private static volatile boolean patched;

    private ExitHook() {}

    /** Installs the handlers: each returns to let the exit happen, or throws to stop it. */
    public static void install(IntConsumer onExit, IntConsumer onHalt) {
        exitHandler = onExit;
        haltHandler = onHalt;
    }

    /** Marks that the patch is in place (set by the agent once both methods call us). */
    public static void markPatched() {
        patched = true;
    }

    /** True once {@code Runtime.exit} and {@code Runtime.halt} call this class. */
    public static boolean isPatched() {
        return patched;
    }

    /** The last of {@code java.lang.Shutdown}'s slots (after the application's hooks and deleteOnExit). */
    private static final int LAST_SLOT = 9;

    /**
     * Registers {@code task} to run after every shutdown hook of the application, the
     * console's and {@code File.deleteOnExit}'s, on the thread that runs them, whenever the
     * JVM shuts down in order ({@code System.exit}, the end of {@code main}, a terminating
     * signal); false if this JDK does not let it.
     */
    public static boolean last(Runnable task) {
        try {
            java.lang.reflect.Method add = Class.forName("java.lang.Shutdown").getDeclaredMethod("add", int.class,
                    boolean.class, Runnable.class);
            add.setAccessible(true);
            add.invoke(null, LAST_SLOT, false, task);
            return true;
        } catch (ReflectiveOperationException | RuntimeException e) {
            return false;
        }
    }

    /** The first call of the patched {@code Runtime.exit(int)}. */
    public static void exit(int status) {
        IntConsumer h = exitHandler;
        if (h != null) {
            h.accept(status);
        }
    }

    /** The first call of the patched {@code Runtime.halt(int)}. */
    public static void halt(int status) {
        IntConsumer h = haltHandler;
        if (h != null) {
            h.accept(status);
        }
    }
}
