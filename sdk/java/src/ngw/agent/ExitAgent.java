/**
 * The Java agent that makes {@code System.exit}, {@code Runtime.exit} and {@code
 * Runtime.halt} trappable on every JDK, with no SecurityManager (which JDK 24 removed).
 *
 * <p>Loaded with {@code -javaagent:ngw-java.jar}, it finds {@code ngw-boot.jar} on the boot
 * class path (or puts it there, from beside the agent's jar), lets {@code java.base} read that
 * jar's module and opens {@code java.lang} to it (for {@link ngw.boot.ThreadState}), and
 * retransforms {@code java.lang.Runtime} so that {@code exit(int)} and {@code halt(int)} first
 * call {@link ngw.boot.ExitHook}. The hook does nothing until the worker installs its
 * handlers. If the patch cannot be applied, the agent leaves the class as it was and says why
 * on stderr; {@link ngw.boot.ExitHook#isPatched} then stays false and the worker refuses to
 * start in the modes that need it.
 */
package ngw.agent;

import java.io.File;
import java.lang.instrument.ClassFileTransformer;
import java.lang.instrument.Instrumentation;
import java.security.ProtectionDomain;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Set;
import java.util.jar.JarFile;

/** See the file comment. */
public final class ExitAgent {
    private static final String HOOK = "ngw/boot/ExitHook";

    private static volatile Instrumentation instrumentation;

    private ExitAgent() {}

    /** The JVM's instrumentation, once the agent has run (the worker lists loaded classes). */
    public static Instrumentation instrumentation() {
        return instrumentation;
    }

    /** The agent's entry point. */
    public static void premain(String args, Instrumentation inst) {
        instrumentation = inst;
        try {
            install(inst);
        } catch (Exception | LinkageError e) {
            System.err.println("ngw-java: cannot trap System.exit: " + e);
        }
    }

    private static void install(Instrumentation inst) throws Exception {
        Class<?> hook;
        try {
            // The launcher names the jar with -Xbootclasspath/a (appending it here instead
            // makes the JVM warn that it stops sharing application classes).
            hook = Class.forName(HOOK.replace('/', '.'), true, null);
        } catch (ClassNotFoundException e) {
            File self = new File(ExitAgent.class.getProtectionDomain().getCodeSource().getLocation().toURI());
            inst.appendToBootstrapClassLoaderSearch(new JarFile(new File(self.getParentFile(), "ngw-boot.jar")));
            hook = Class.forName(HOOK.replace('/', '.'), true, null);
        }
        // java.base reads the hook's module (the boot class path's classes, ours), and opens
        // java.lang to it alone, for ThreadState.
        Module base = Runtime.class.getModule();
        inst.redefineModule(base, Set.of(hook.getModule()), Map.of(), Map.of("java.lang", Set.of(hook.getModule())),
                Set.of(), Map.of());

        Map<String, String> hooks = new LinkedHashMap<>();
        hooks.put("exit", "exit");
        hooks.put("halt", "halt");
        String[] failure = new String[1];
        boolean[] applied = new boolean[1];
        ClassFileTransformer t = new ClassFileTransformer() {
            @Override
            public byte[] transform(Module module, ClassLoader loader, String name, Class<?> redefined,
                    ProtectionDomain domain, byte[] bytes) {
                if (!"java/lang/Runtime".equals(name)) {
                    return null;
                }
                try {
                    byte[] patched = ClassPatch.prefixIntCalls(bytes, HOOK, hooks);
                    applied[0] = true;
                    return patched;
                } catch (ClassPatch.PatchException e) {
                    failure[0] = e.getMessage();
                    return null;
                }
            }
        };
        inst.addTransformer(t, true);
        try {
            inst.retransformClasses(Runtime.class);
        } finally {
            inst.removeTransformer(t);
        }
        if (failure[0] != null || !applied[0]) {
            throw new IllegalStateException("java.lang.Runtime: "
                    + (failure[0] != null ? failure[0] : "the class was not offered for retransformation"));
        }
        hook.getMethod("markPatched").invoke(null);
    }
}
