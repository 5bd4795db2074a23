package ngtest;

import java.io.File;
import java.io.IOException;
import java.nio.file.Path;

/**
 * A plain `main` that prints what a JVM run exactly as cold must see: its arguments, the
 * environment entry `PROBE`, `user.dir`, relative paths made absolute (`File` and `Path`),
 * a static counter (always 1 in a fresh JVM), whether `System.console()` exists, whether
 * `/dev/tty` opens (a controlling terminal), and, with
 * the argument `stdin`, how many bytes stdin held. The argument `sleep=MS` then prints
 * `ready`, sleeps MS milliseconds and prints `woke`; `exit=N` exits with N.
 */
public class ExactProbe {
    private static int runs;

    public static void main(String[] args) throws IOException {
        runs++;
        System.out.println("args=" + String.join("|", args));
        System.out.println("PROBE=" + System.getenv("PROBE"));
        System.out.println("user.dir=" + System.getProperty("user.dir"));
        System.out.println("file=" + new File("rel").getAbsolutePath());
        System.out.println("path=" + Path.of("rel").toAbsolutePath());
        System.out.println("runs=" + runs);
        System.out.println("console=" + (System.console() != null));
        String tty;
        try (java.io.FileOutputStream t = new java.io.FileOutputStream("/dev/tty")) {
            tty = "opens";
        } catch (IOException e) {
            tty = e.getMessage();
        }
        System.out.println("devtty=" + tty);
        for (String a : args) {
            if (a.equals("stdin")) {
                System.out.println("stdin=" + System.in.readAllBytes().length);
            }
            if (a.startsWith("sleep=")) {
                System.out.println("ready");
                try {
                    Thread.sleep(Long.parseLong(a.substring(6)));
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
                System.out.println("woke");
            }
            if (a.startsWith("exit=")) {
                System.exit(Integer.parseInt(a.substring(5)));
            }
        }
    }
}
