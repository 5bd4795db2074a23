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
 * ways. The signals {@link Signals#isStop} names are those whose effect stops a process in
 * the vocabulary's table ({@code vocab/src/signal.rs}), and every notice kind the worker
 * sends is in the vocabulary ({@code vocab/src/notice.rs}).
 */
public final class SignalsTest {
    /** One entry of the Rust table: {@code (Signal::Int, "SIGINT", libc::SIGINT),}. */
    private static final Pattern ENTRY =
            Pattern.compile("^\\s*\\(Signal::(\\w+), \"(SIG\\w+)\", libc::(SIG\\w+)\\),\\s*$", Pattern.MULTILINE);

    /** One entry of the vocabulary's effects: {@code (Signal::Tstp, Effect::Stops),}. */
    private static final Pattern EFFECT =
            Pattern.compile("^\\s*\\(Signal::(\\w+), Effect::(\\w+)\\),\\s*$", Pattern.MULTILINE);

    /** One entry of the vocabulary's notice kinds: {@code (NoticeKind::Stale, "stale"),}. */
    private static final Pattern KIND =
            Pattern.compile("^\\s*\\(NoticeKind::\\w+, \"(\\w+)\"\\),\\s*$", Pattern.MULTILINE);

    /** A notice the worker sends: {@code notice("stale", ...}. */
    private static final Pattern SENT = Pattern.compile("notice\\(\"(\\w+)\"");

    public static void main(String[] args) throws IOException {
        List<String> rust = new ArrayList<>();
        List<String> variants = new ArrayList<>();
        Path root = rustTable().getParent().getParent().getParent();
        Matcher m = ENTRY.matcher(Files.readString(rustTable()));
        while (m.find()) {
            check(m.group(2).equals(m.group(3)), "name and libc constant differ: " + m.group());
            rust.add(m.group(2));
            variants.add(m.group(1));
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
        Matcher e = EFFECT.matcher(Files.readString(root.resolve("vocab/src/signal.rs")));
        int i = 0;
        for (; e.find(); i++) {
            check(i < variants.size() && e.group(1).equals(variants.get(i)), "effects out of order: " + e.group());
            String name = rust.get(i);
            check(Signals.isStop(name) == e.group(2).equals("Stops"), "isStop(" + name + ")");
        }
        check(i == rust.size(), "the effects cover " + i + " of " + rust.size() + " signals");
        List<String> kinds = new ArrayList<>();
        Matcher k = KIND.matcher(Files.readString(root.resolve("vocab/src/notice.rs")));
        while (k.find()) {
            kinds.add(k.group(1));
        }
        check(!kinds.isEmpty(), "no notice kind in the vocabulary");
        List<Path> sources;
        try (var walk = Files.walk(root.resolve("sdk/java/src"))) {
            sources = walk.filter(p -> p.toString().endsWith(".java")).toList();
        }
        int sent = 0;
        for (Path source : sources) {
            Matcher n = SENT.matcher(Files.readString(source));
            while (n.find()) {
                check(kinds.contains(n.group(1)), source + " sends an unknown notice kind: " + n.group(1));
                sent++;
            }
        }
        check(sent > 0, "no notice found in the worker's sources");
        System.out.println("SignalsTest: " + rust.size() + " names, their stops and " + sent + " notices agree");
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
