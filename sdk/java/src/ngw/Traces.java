/**
 * Prints an uncaught exception as the JVM's launcher does for a {@code main} that throws
 * ({@code Exception in thread "main" ...}), without the frames of the worker that invoked the
 * program: everything below the program's entry method is cut from every trace in the
 * exception's graph, so the output reads as a cold run's.
 */
package ngw;

import java.io.PrintStream;
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.Set;

/** See the file comment. */
public final class Traces {
    private Traces() {}

    /** Prints {@code t} on {@code err} as thrown out of {@code entryClass.entryMethod}. */
    public static void printUncaught(PrintStream err, Throwable t, String thread, String entryClass,
            String entryMethod) {
        trim(t, entryClass, entryMethod, Collections.newSetFromMap(new IdentityHashMap<>()));
        err.print("Exception in thread \"" + thread + "\" ");
        t.printStackTrace(err);
        err.flush();
    }

    /** Cuts the frames below {@code cls.method} from every trace in {@code t}'s graph. */
    public static void trim(Throwable t, String cls, String method) {
        trim(t, cls, method, Collections.newSetFromMap(new IdentityHashMap<>()));
    }

    private static void trim(Throwable t, String cls, String method, Set<Throwable> seen) {
        if (t == null || !seen.add(t)) {
            return;
        }
        StackTraceElement[] frames = t.getStackTrace();
        int cut = -1;
        for (int i = frames.length - 1; i >= 0; i--) {
            if (frames[i].getClassName().equals(cls) && frames[i].getMethodName().equals(method)) {
                cut = i + 1;
                break;
            }
        }
        if (cut < 0) {
            for (int i = 0; i < frames.length; i++) {
                String c = frames[i].getClassName();
                if (c.startsWith("jdk.internal.reflect.") || c.equals("java.lang.reflect.Method")
                        || c.startsWith("ngw.")) {
                    cut = i;
                    break;
                }
            }
        }
        if (cut >= 0 && cut < frames.length) {
            t.setStackTrace(java.util.Arrays.copyOf(frames, cut));
        }
        trim(t.getCause(), cls, method, seen);
        for (Throwable s : t.getSuppressed()) {
            trim(s, cls, method, seen);
        }
    }
}
