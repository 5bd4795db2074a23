/**
 * Finds and runs what a session's command names, in the shared JVM: an alias, a class by
 * name (with {@code --nails}), or the worker's main class. A class's entry point is chosen as
 * Nailgun chooses it: a {@code NonStaticNail} of either API generation gets a new instance's
 * {@code nailMain(String[])}; else {@code public static void nailMain(NGContext)} of either
 * generation; else {@code public static void main(String[])}.
 */
package ngw.shared;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;

import ngw.ExitSignal;
import ngw.NailSession;
import ngw.Traces;

/** See the file comment. */
final class Nails {
    /** The command names no class. */
    static final class NoSuchNail extends Exception {
        private static final long serialVersionUID = 1L;

        NoSuchNail(String message) {
            super(message);
        }
    }

    private Nails() {}

    /** How a class runs, found once per class. */
    private enum Kind { NON_STATIC, MARTIAN, FACEBOOK, MAIN, NONE }

    private record Entry(Kind kind, Method method) {}

    private static final java.util.Map<Class<?>, Entry> ENTRIES =
            java.util.Collections.synchronizedMap(new java.util.WeakHashMap<>());

    private static Entry entry(Class<?> c) {
        Entry e = ENTRIES.get(c);
        if (e != null) {
            return e;
        }
        Method m;
        if (com.martiansoftware.nailgun.NonStaticNail.class.isAssignableFrom(c)
                || com.facebook.nailgun.NonStaticNail.class.isAssignableFrom(c)) {
            try {
                e = new Entry(Kind.NON_STATIC, c.getMethod("nailMain", String[].class));
            } catch (NoSuchMethodException ex) {
                e = new Entry(Kind.NONE, null);
            }
        } else if ((m = staticMethod(c, "nailMain", com.martiansoftware.nailgun.NGContext.class)) != null) {
            e = new Entry(Kind.MARTIAN, m);
        } else if ((m = staticMethod(c, "nailMain", com.facebook.nailgun.NGContext.class)) != null) {
            e = new Entry(Kind.FACEBOOK, m);
        } else if ((m = staticMethod(c, "main", String[].class)) != null) {
            e = new Entry(Kind.MAIN, m);
        } else {
            e = new Entry(Kind.NONE, null);
        }
        ENTRIES.put(c, e);
        return e;
    }

    /** Runs {@code className} for {@code session}; returns the session's exit status. */
    static int run(Session session, String className, ClassLoader loader) throws NoSuchNail {
        Class<?> c;
        try {
            c = Class.forName(className, false, loader);
        } catch (ClassNotFoundException | LinkageError e) {
            throw new NoSuchNail("no class '" + className + "' on the classpath");
        }
        Thread.currentThread().setContextClassLoader(loader);
        Entry e = entry(c);
        try {
            return switch (e.kind) {
                case NON_STATIC -> invoke(session, c, "nailMain", e.method, c.getDeclaredConstructor().newInstance(),
                        new Object[] {session.args()});
                case MARTIAN -> invoke(session, c, "nailMain", e.method, null,
                        new Object[] {new com.martiansoftware.nailgun.NGContext(session)});
                case FACEBOOK -> invoke(session, c, "nailMain", e.method, null,
                        new Object[] {new com.facebook.nailgun.NGContext(session)});
                case MAIN -> invoke(session, c, "main", e.method, null, new Object[] {session.args()});
                case NONE -> throw new NoSuchNail("class '" + className + "' has no nailMain or main method");
            };
        } catch (InvocationTargetException ex) {
            return uncaught(session, ex.getCause(), c.getName(), "<init>");
        } catch (ReflectiveOperationException ex) {
            throw new NoSuchNail("cannot run class '" + className + "': " + ex);
        }
    }

    private static Method staticMethod(Class<?> c, String name, Class<?> param) {
        try {
            Method m = c.getMethod(name, param);
            return Modifier.isStatic(m.getModifiers()) ? m : null;
        } catch (NoSuchMethodException e) {
            return null;
        }
    }

    private static int invoke(Session session, Class<?> c, String entry, Method m, Object target, Object[] args)
            throws IllegalAccessException {
        try {
            m.invoke(target, args);
            return 0;
        } catch (InvocationTargetException e) {
            return uncaught(session, e.getCause(), c.getName(), entry);
        } catch (ExceptionInInitializerError e) {
            return uncaught(session, e, c.getName(), entry);
        }
    }

    private static int uncaught(NailSession session, Throwable t, String cls, String entry) {
        if (t instanceof ExitSignal x) {
            return x.status();
        }
        Traces.printUncaught(session.err(), t, "main", cls, entry);
        return 1;
    }
}
