/**
 * The JVM worker's entry point, run by {@code bin/ngw-java}: reads the worker's options and
 * the channel (which the launcher put on fd 0), then serves.
 */
package ngw;

import java.io.FileDescriptor;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.util.Arrays;
import java.util.List;

import ngw.shared.SharedWorker;

/** See the file comment. */
public final class Main {
    private Main() {}

    public static void main(String[] argv) {
        Options options;
        try {
            options = Options.parse(argv);
        } catch (Options.UsageError e) {
            System.err.println("ngw-java: " + e.getMessage());
            Runtime.getRuntime().halt(2);
            return;
        }
        String features = System.getenv("NGW_HOST_FEATURES");
        List<String> host = features == null || features.isEmpty() ? List.of() : Arrays.asList(features.split(","));
        if (options.mode == Options.Mode.EXACT) {
            new ngw.exact.ExactWorker(options, host).serve();
            return;
        }
        FileInputStream in = new FileInputStream(FileDescriptor.in);
        FileOutputStream out = new FileOutputStream(FileDescriptor.in);
        new SharedWorker(options, in, out, host).serve();
    }
}
