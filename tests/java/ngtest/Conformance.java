package ngtest;

import java.io.ByteArrayOutputStream;
import java.io.FileWriter;
import java.io.IOException;
import java.io.RandomAccessFile;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import sun.misc.Signal;

/**
 * The worker conformance suite's program for the JVM (docs/ngw.md, "The worker
 * conformance suite"): {@code Conformance BEHAVIOUR}, run cold and warm with the same shell
 * line, must show the same terminal. It implements the behaviours of every runtime's
 * program but {@code ctrl-backslash} (the JVM answers SIGQUIT with a thread dump). With
 * {@code CONFORMANCE_TRACE} set it first appends its pid, its parent's and its
 * grandparent's to that file.
 */
public class Conformance {
    public static void main(String[] args) throws Exception {
        trace();
        String what = args.length > 0 ? args[0] : "";
        switch (what) {
            case "devtty" -> {
                try (RandomAccessFile tty = new RandomAccessFile("/dev/tty", "rw")) {
                    tty.write("tty says hi\n".getBytes(StandardCharsets.UTF_8));
                    System.err.println("read " + line(tty));
                }
            }
            case "foreground" -> {
                String[] f = stat();
                boolean fg = f[2].equals(f[5]); // pgrp, tpgid
                System.out.println("foreground " + fg + " " + fg);
            }
            case "getpass" -> {
                try (RandomAccessFile tty = new RandomAccessFile("/dev/tty", "rw")) {
                    sh("stty -echo </dev/tty");
                    tty.write("Password: ".getBytes(StandardCharsets.UTF_8));
                    String p = line(tty);
                    sh("stty echo </dev/tty");
                    tty.write("\n".getBytes(StandardCharsets.UTF_8));
                    String in = new String(System.in.readAllBytes(), StandardCharsets.UTF_8);
                    System.out.println("got " + (p.length() - 2) + " stdin " + in.replace("\n", "\\n"));
                }
            }
            case "bash" -> run(new ProcessBuilder("bash", "--norc", "--noprofile", "-i", "-c", "echo hi"));
            case "ctrl-c" -> {
                System.out.println("ready");
                Thread.sleep(30000);
            }
            case "ctrl-c-child", "ctrl-backslash" -> {
                String name = what.equals("ctrl-c-child") ? "INT" : "QUIT";
                CountDownLatch got = new CountDownLatch(1);
                Signal.handle(new Signal(name), s -> got.countDown());
                // Ready once the child can take the signal too.
                System.out.flush();
                int code = run(new ProcessBuilder("sh", "-c", "trap 'echo child got " + name
                        + "; exit 3' " + name + "; echo ready; sleep 30 & wait"));
                // The handler runs on a thread of its own: it may come after the child's end.
                boolean handled = got.await(5, TimeUnit.SECONDS);
                System.out.println("command got " + name + " " + handled + " child exited " + code);
            }
            case "ctrl-z" -> {
                System.out.println("ready");
                run(new ProcessBuilder("sleep", "1"));
                System.out.println("done");
            }
            case "resize" -> {
                CountDownLatch resized = new CountDownLatch(1);
                Signal.handle(new Signal("WINCH"), s -> resized.countDown());
                System.out.println("size " + size());
                System.out.println("ready");
                resized.await(10, TimeUnit.SECONDS);
                System.out.println("resized " + size());
            }
            case "pipes" -> {
                byte[] data = System.in.readAllBytes();
                long sum = 0;
                for (byte b : data) {
                    sum += b & 0xff;
                }
                StringBuilder kinds = new StringBuilder();
                for (int fd = 0; fd < 3; fd++) {
                    kinds.append(' ').append(kind(fd));
                }
                System.out.println("stdin " + data.length + " " + sum % 65521 + " fds" + kinds);
                System.err.println("to stderr");
                System.exit(3);
            }
            case "killed" -> {
                System.out.println("dying");
                System.out.flush();
                run(new ProcessBuilder("kill", "-TERM", Long.toString(ProcessHandle.current().pid())));
                Thread.sleep(10000);
            }
            default -> {
                System.err.println("unknown behaviour '" + what + "'");
                System.exit(1);
            }
        }
    }

    private static void trace() throws IOException {
        String path = System.getenv("CONFORMANCE_TRACE");
        if (path == null || path.isEmpty()) {
            return;
        }
        ProcessHandle me = ProcessHandle.current();
        long parent = me.parent().map(ProcessHandle::pid).orElse(0L);
        long grandparent = me.parent().flatMap(ProcessHandle::parent).map(ProcessHandle::pid).orElse(0L);
        try (FileWriter w = new FileWriter(path, StandardCharsets.UTF_8, true)) {
            w.write(me.pid() + " " + parent + " " + grandparent + "\n");
        }
    }

    /** The fields of /proc/self/stat after the command name: 0 the state, 2 pgrp, 5 tpgid. */
    private static String[] stat() throws IOException {
        String s = Files.readString(Path.of("/proc/self/stat"));
        return s.substring(s.lastIndexOf(')') + 2).split(" ");
    }

    /** A line read from the terminal, its end of line shown as \n. */
    private static String line(RandomAccessFile tty) throws IOException {
        ByteArrayOutputStream line = new ByteArrayOutputStream();
        int c;
        while ((c = tty.read()) >= 0) {
            line.write(c);
            if (c == '\n') {
                break;
            }
        }
        return line.toString(StandardCharsets.UTF_8).replace("\n", "\\n");
    }

    private static int run(ProcessBuilder pb) throws IOException, InterruptedException {
        return pb.inheritIO().start().waitFor();
    }

    private static void sh(String script) throws IOException, InterruptedException {
        run(new ProcessBuilder("sh", "-c", script));
    }

    /** {@code stty size} of the terminal. */
    private static String size() throws IOException, InterruptedException {
        Process p = new ProcessBuilder("sh", "-c", "stty size </dev/tty")
                .redirectError(ProcessBuilder.Redirect.INHERIT).start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8).trim();
        p.waitFor();
        return out;
    }

    /** What fd {@code fd} is: pipe, socket, null, tty, closed or file. */
    private static String kind(int fd) {
        try {
            String target = Files.readSymbolicLink(Path.of("/proc/self/fd/" + fd)).toString();
            if (target.startsWith("pipe:")) {
                return "pipe";
            } else if (target.startsWith("socket:")) {
                return "socket";
            } else if (target.equals("/dev/null")) {
                return "null";
            } else if (target.startsWith("/dev/pts/") || target.startsWith("/dev/tty")) {
                return "tty";
            }
            return "file";
        } catch (IOException e) {
            return "closed";
        }
    }
}
