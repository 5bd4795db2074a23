package ngtest;

/**
 * A plain `main` for the launcher tests: prints its arguments, the JDK's specification
 * version, the environment entry `PROBE` and `user.dir` on stdout, a line on stderr; the
 * argument `exit=N` exits with N.
 */
public class LauncherProbe {
    public static void main(String[] args) {
        System.out.println("args=" + String.join("|", args));
        System.out.println("java=" + System.getProperty("java.specification.version"));
        System.out.println("PROBE=" + System.getenv("PROBE"));
        System.out.println("user.dir=" + System.getProperty("user.dir"));
        System.err.println("to stderr");
        for (String a : args) {
            if (a.startsWith("exit=")) {
                System.exit(Integer.parseInt(a.substring(5)));
            }
        }
    }
}
