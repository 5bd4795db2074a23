package ngw.exact;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * The worker's signal names agree with ngd's: the one Rust table ({@code proto/src/signal.rs},
 * read from its source, found from the working directory upwards) names the same signals, in
 * the same order of numbers, as {@link Signals}, and each name means the same number both
 * ways.
 */
public final class SignalsTest {
    /** One entry of the Rust table: {@code (Signal::Int, "SIGINT", libc::SIGINT),}. */
    private static final Pattern ENTRY =
            Pattern.compile("^\\s*\\(Signal::(\\w+), \"(SIG\\w+)\", libc::(SIG\\w+)\\),\\s*$", Pattern.MULTILINE);

    public static void main(String[] args) throws IOException {
        List<String> rust = new ArrayList<>();
        Matcher m = ENTRY.matcher(Files.readString(rustTable()));
        while (m.find()) {
            check(m.group(2).equals(m.group(3)), "name and libc constant differ: " + m.group());
            rust.add(m.group(2));
        }
        check(!rust.isEmpty(), "no entry in the Rust table");
        List<String> java = new ArrayList<>();
        for (int n = 1; Signals.number(Signals.name(n)) == n; n++) {
            java.add(Signals.name(n));
        }
        check(rust.equals(java), "Rust " + rust + " but Java " + java);
        for (String name : rust) {
            check(Signals.name(Signals.number(name)).equals(name), name);
        }
        System.out.println("SignalsTest: " + rust.size() + " names agree");
    }

    private static Path rustTable() {
        for (Path dir = Path.of("").toAbsolutePath(); dir != null; dir = dir.getParent()) {
            Path table = dir.resolve("proto/src/signal.rs");
            if (Files.isRegularFile(table)) {
                return table;
            }
        }
        throw new AssertionError("proto/src/signal.rs not found above " + Path.of("").toAbsolutePath());
    }

    private static void check(boolean ok, String what) {
        if (!ok) {
            throw new AssertionError(what);
        }
    }
}
