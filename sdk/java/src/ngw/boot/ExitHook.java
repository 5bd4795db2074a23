/**
 * The one class the exit agent puts on the boot class path.
 *
 * <p>{@link ngw.agent.ExitAgent} patches {@code java.lang.Runtime.exit(int)} and {@code
 * Runtime.halt(int)} to call {@link #exit} and {@link #halt} first. With no handler installed
 * both return at once and the JVM exits as usual; the worker installs a handler that ends the
 * calling session instead, by throwing, and lets every other caller through.
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
