/**
 * Clears a thread's thread-local variables, so that a session thread the worker uses again
 * starts its next session with none, as a new thread does. It lives on the boot class path
 * because the exit agent opens {@code java.lang} to the boot class path's own classes (ours),
 * and to no one else: the programs' classes see {@code java.lang} as they would without us.
 */
package ngw.boot;

import java.lang.reflect.Field;

/** See the file comment. */
public final class ThreadState {
    private static final Field LOCALS = field("threadLocals");
    private static final Field INHERITABLE = field("inheritableThreadLocals");

    private ThreadState() {}

    private static Field field(String name) {
        try {
            Field f = Thread.class.getDeclaredField(name);
            f.setAccessible(true);
            return f;
        } catch (ReflectiveOperationException | RuntimeException e) {
            return null;
        }
    }

    /** Whether {@link #clear} can clear (the agent opened {@code java.lang} to us). */
    public static boolean available() {
        return LOCALS != null && INHERITABLE != null;
    }

    /**
     * Drops every thread-local and inheritable thread-local value of {@code t} (the calling
     * thread); false, with nothing done, when that cannot be done.
     */
    public static boolean clear(Thread t) {
        if (!available()) {
            return false;
        }
        try {
            LOCALS.set(t, null);
            INHERITABLE.set(t, null);
            return true;
        } catch (IllegalAccessException | RuntimeException e) {
            return false;
        }
    }
}
