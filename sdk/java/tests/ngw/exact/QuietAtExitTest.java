package ngw.exact;

import java.util.List;

/**
 * Which JVM options let a spare tell its exit status early: those that do nothing after the
 * shutdown hooks (properties, sizes, assertions, module options, the collector), and not
 * those that may print or write as the JVM exits (logging, agents, flight recordings).
 */
public final class QuietAtExitTest {
    public static void main(String[] args) {
        check(Spares.quietAtExit(List.of()), "no options");
        check(Spares.quietAtExit(List.of("-Dfile.encoding=UTF-8", "-Xmx512m", "-Xss2m", "-ea", "-da:com.x...",
                "--add-opens", "java.base/java.lang=ALL-UNNAMED", "--add-exports=java.base/sun.nio.ch=ALL-UNNAMED",
                "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:MaxRAMPercentage=50")), "plain options");
        for (String o : List.of("-Xlog:gc", "-verbose:class", "-javaagent:a.jar", "-agentlib:jdwp=x",
                "-XX:StartFlightRecording", "-XX:+PrintCompilation", "-XX:+UnlockDiagnosticVMOptions", "-Xshare:off",
                "-XX:NativeMemoryTracking=summary")) {
            check(!Spares.quietAtExit(List.of("-Xmx64m", o)), o);
        }
        // The value of a two-part option is not an option of its own.
        check(Spares.quietAtExit(List.of("--add-modules", "-Xlog:gc")), "a value taken as an option");
        System.out.println("QuietAtExitTest: ok");
    }

    private static void check(boolean ok, String what) {
        if (!ok) {
            throw new AssertionError(what);
        }
    }
}
