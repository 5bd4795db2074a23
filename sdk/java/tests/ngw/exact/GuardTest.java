package ngw.exact;

import java.io.File;
import java.io.FileDescriptor;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;

/**
 * The guard of a spare's initialisation ahead: its program is well formed (every jump lands
 * inside it, it ends by allowing), and on a thread it confines, what only a session may do
 * (create a file, write to stdout) ends the thread before it happens, while reading a file
 * and starting a thread go on; other threads are not confined.
 */
public final class GuardTest {
    public static void main(String[] args) throws Exception {
        long[] p = Guard.program(ProcessHandle.current().pid());
        check(p.length < 4096, "program too long: " + p.length);
        for (int i = 0; i < p.length; i++) {
            int code = (int) (p[i] >>> 48);
            int jt = (int) (p[i] >>> 40) & 0xFF;
            int jf = (int) (p[i] >>> 32) & 0xFF;
            if ((code & 0x07) == 0x05) {
                check(i + 1 + Math.max(jt, jf) < p.length, "jump out of the program at " + i);
            }
        }
        check(p[p.length - 1] == ((0x06L << 48) | Guard.RET_ALLOW), "the program does not end by allowing");
        if (!Guard.supported()) {
            System.out.println("GuardTest: not Linux on x86-64, the filter itself is not run");
            return;
        }
        Path dir = Files.createTempDirectory("guard-test");
        Path readable = dir.resolve("readable");
        Files.writeString(readable, "content");
        Path created = dir.resolve("created");

        // Reading a file and starting a thread are allowed.
        String read = confined(() -> {
            try (FileInputStream in = new FileInputStream(readable.toFile())) {
                Thread t = new Thread(() -> { });
                t.start();
                t.join();
                return new String(in.readAllBytes());
            }
        });
        check("content".equals(read), "a confined thread could not read a file: " + read);

        // Creating a file ends the thread before the file exists.
        check(confined(() -> {
            new FileOutputStream(created.toFile()).close();
            return "created";
        }) == null, "a confined thread created a file");
        check(!Files.exists(created), "the file was created");

        // Writing to stdout ends the thread (unbuffered: System.out's lock would stay held).
        check(confined(() -> {
            new FileOutputStream(FileDescriptor.out).write("from a confined thread\n".getBytes());
            return "printed";
        }) == null, "a confined thread printed");

        // This thread is not confined.
        new FileOutputStream(created.toFile()).close();
        check(Files.exists(created), "the test's own thread was confined");
        Files.delete(created);
        Files.delete(readable);
        Files.delete(dir);
        System.out.println("GuardTest: ok");
    }

    interface Body {
        String run() throws Exception;
    }

    /** Runs {@code body} on a confined thread: its result, or null when the guard ended it. */
    private static String confined(Body body) throws Exception {
        AtomicInteger tid = new AtomicInteger();
        AtomicReference<String> result = new AtomicReference<>();
        AtomicReference<Throwable> failed = new AtomicReference<>();
        long[] program = Guard.program(ProcessHandle.current().pid());
        Thread t = new Thread(() -> {
            tid.set(Posix.threadId());
            try {
                Posix.confineThread(program);
                result.set(body.run());
            } catch (Throwable e) {
                failed.set(e);
            }
        }, "confined");
        // A thread the guard killed stays alive to the JVM: it must not keep it from exiting.
        t.setDaemon(true);
        t.start();
        long deadline = System.nanoTime() + 10_000_000_000L;
        while (t.isAlive()) {
            t.join(10);
            if (tid.get() > 0 && !new File("/proc/self/task/" + tid.get()).exists() && t.isAlive()) {
                return null;
            }
            check(System.nanoTime() < deadline, "the confined thread hangs");
        }
        if (failed.get() != null) {
            throw new IllegalStateException("the confined thread failed", failed.get());
        }
        return result.get();
    }

    private static void check(boolean ok, String what) {
        if (!ok) {
            throw new IllegalStateException(what);
        }
    }
}
