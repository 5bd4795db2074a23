package ngtest;

import java.io.File;

/**
 * A plain `main` that ends in the way its argument says, each printing on stdout and stderr
 * on the way: `return`, `throw` (uncaught), `exit=N` (System.exit), `thread-exit=N` (a
 * non-daemon thread calls System.exit after main returned), `halt=N` (Runtime.halt), `hook`
 * (shutdown hooks that print, and a file deleted on exit, named by the second argument),
 * `hook-exit=N`, `daemon` (a daemon thread still running, after having printed), `kill` and
 * `term` (the JVM signals itself, SIGKILL or SIGTERM).
 */
public class Ends {
    public static void main(String[] args) throws Exception {
        String how = args.length > 0 ? args[0] : "return";
        System.out.println("main " + how);
        System.err.println("err " + how);
        String[] kv = how.split("=", 2);
        int n = kv.length > 1 ? Integer.parseInt(kv[1]) : 0;
        switch (kv[0]) {
            case "return" -> System.out.print("no newline");
            case "throw" -> throw new IllegalStateException("thrown " + how);
            case "exit" -> System.exit(n);
            case "thread-exit" -> new Thread(() -> {
                sleep(150);
                System.out.println("thread exits " + n);
                System.exit(n);
            }).start();
            case "halt" -> {
                Runtime.getRuntime().addShutdownHook(new Thread(() -> System.out.println("hook never runs")));
                Runtime.getRuntime().halt(n);
            }
            case "hook", "hook-exit" -> {
                // The hooks run at once; each waits for the one before it to have printed.
                int[] printed = {0};
                for (int i = 0; i < 3; i++) {
                    int k = i;
                    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
                        synchronized (printed) {
                            while (printed[0] < k) {
                                try {
                                    printed.wait();
                                } catch (InterruptedException e) {
                                    return;
                                }
                            }
                            sleep(20);
                            System.out.println("hook " + k);
                            System.err.println("hook err " + k);
                            printed[0]++;
                            printed.notifyAll();
                        }
                    }));
                }
                if (args.length > 1) {
                    new File(args[1]).deleteOnExit();
                }
                if (kv[0].equals("hook-exit")) {
                    System.exit(n);
                }
            }
            case "daemon" -> {
                Object printed = new Object();
                Thread t = new Thread(() -> {
                    synchronized (printed) {
                        System.out.println("daemon says");
                        printed.notifyAll();
                    }
                    sleep(60_000);
                });
                t.setDaemon(true);
                synchronized (printed) {
                    t.start();
                    printed.wait();
                }
            }
            case "kill", "term" -> {
                System.out.flush();
                new ProcessBuilder("kill", kv[0].equals("kill") ? "-KILL" : "-TERM",
                        String.valueOf(ProcessHandle.current().pid())).inheritIO().start().waitFor();
                sleep(60_000);
            }
            default -> throw new IllegalArgumentException(how);
        }
    }

    private static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
