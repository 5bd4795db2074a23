package ngw.agent;

import java.io.IOException;
import java.io.InputStream;
import java.lang.reflect.Method;
import java.net.URI;
import java.nio.file.FileSystem;
import java.nio.file.FileSystems;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * Tests of {@link ClassPatch}: patched methods call the hook first and then run their own
 * code, branches and exception handlers still land where they did (the stack map frames and
 * the exception table shifted), a missing method or a malformed class is refused, and the
 * running JDK's own {@code java.lang.Runtime} patches.
 */
public final class ClassPatchTest {
    /** Calls made to the hook. */
    public static final List<String> CALLS = new ArrayList<>();

    /** The hook the patched test class calls. */
    public static final class Hook {
        public static void exit(int status) {
            CALLS.add("exit " + status);
        }

        public static void halt(int status) {
            CALLS.add("halt " + status);
        }
    }

    /** The class patched: a branch and an exception handler in one method, none in the other. */
    public static class Target {
        public static final List<String> RAN = new ArrayList<>();

        public void exit(int status) {
            Object guard = status > 10 ? "big" : null;
            if (guard != null) {
                RAN.add("big " + status);
            }
            try {
                if (status == 99) {
                    throw new IllegalStateException("99");
                }
                RAN.add("exit " + status);
            } catch (IllegalStateException e) {
                RAN.add("caught " + e.getMessage());
            }
        }

        public void halt(int status) {
            RAN.add("halt " + status);
        }
    }

    private static final class Loader extends ClassLoader {
        Loader() {
            super(ClassPatchTest.class.getClassLoader());
        }

        Class<?> define(String name, byte[] bytes) {
            return defineClass(name, bytes, 0, bytes.length);
        }
    }

    static byte[] bytesOf(Class<?> c) throws IOException {
        String path = "/" + c.getName().replace('.', '/') + ".class";
        try (InputStream in = c.getResourceAsStream(path)) {
            return in.readAllBytes();
        }
    }

    static void check(boolean ok, String what) {
        if (!ok) {
            throw new AssertionError(what);
        }
    }

    static void patchedMethodsCallTheHookFirst() throws Exception {
        byte[] patched = ClassPatch.prefixIntCalls(bytesOf(Target.class), Hook.class.getName().replace('.', '/'),
                Map.of("exit", "exit", "halt", "halt"));
        Class<?> c = new Loader().define(Target.class.getName(), patched);
        Object t = c.getConstructor().newInstance();
        @SuppressWarnings("unchecked")
        List<String> ran = (List<String>) c.getField("RAN").get(null);
        Method exit = c.getMethod("exit", int.class);
        Method halt = c.getMethod("halt", int.class);
        CALLS.clear();
        exit.invoke(t, 3);
        exit.invoke(t, 42);
        exit.invoke(t, 99);
        halt.invoke(t, 7);
        check(CALLS.equals(List.of("exit 3", "exit 42", "exit 99", "halt 7")), "hook calls: " + CALLS);
        check(ran.equals(List.of("exit 3", "big 42", "exit 42", "big 99", "caught 99", "halt 7")), "ran: " + ran);
    }

    static void refusesWhatItCannotPatch() throws Exception {
        try {
            ClassPatch.prefixIntCalls(bytesOf(Target.class), "h/H", Map.of("nosuch", "exit"));
            check(false, "a missing method was patched");
        } catch (ClassPatch.PatchException e) {
            check(e.getMessage().contains("found 0 of the 1"), e.getMessage());
        }
        byte[] bytes = bytesOf(Target.class);
        for (int cut : new int[] {0, 4, 10, bytes.length / 2, bytes.length - 1}) {
            try {
                ClassPatch.prefixIntCalls(java.util.Arrays.copyOf(bytes, cut), "h/H", Map.of("exit", "exit"));
                check(false, "a class cut at " + cut + " was patched");
            } catch (ClassPatch.PatchException e) {
                // Refused, as it must be.
            }
        }
    }

    static void patchesTheRunningJdksRuntime() throws Exception {
        FileSystem jrt = FileSystems.getFileSystem(URI.create("jrt:/"));
        byte[] runtime = Files.readAllBytes(jrt.getPath("modules/java.base/java/lang/Runtime.class"));
        byte[] patched = ClassPatch.prefixIntCalls(runtime, "ngw/boot/ExitHook", Map.of("exit", "exit", "halt", "halt"));
        check(patched.length > runtime.length, "Runtime grew");
    }

    public static void main(String[] args) throws Exception {
        patchedMethodsCallTheHookFirst();
        refusesWhatItCannotPatch();
        patchesTheRunningJdksRuntime();
        System.out.println("ClassPatchTest: 3 passed, 0 failed");
    }
}
