package ngtest;

import com.martiansoftware.nailgun.NGContext;
import java.nio.charset.StandardCharsets;
import java.util.Properties;
import java.util.TreeSet;

/**
 * Prints what the server received from the client: arguments, environment and working
 * directory, one item per line, every string as lowercase hex of its UTF-8 bytes.
 *
 * Hex keeps the output unambiguous whatever the values hold (empty strings, `=`, spaces,
 * newlines, non-ASCII). Format, in this order:
 *
 * <pre>
 * A:&lt;hex&gt;               one per argument, in order (an empty argument is "A:")
 * E:&lt;hex name&gt;:&lt;hex value&gt;  one per environment entry, sorted by name
 * D:&lt;hex&gt;               the working directory, absent if the client sent none
 * </pre>
 */
public class Dump {
    public static void nailMain(NGContext ctx) {
        StringBuilder sb = new StringBuilder();
        for (String arg : ctx.getArgs()) {
            sb.append("A:").append(hex(arg)).append('\n');
        }
        Properties env = ctx.getEnv();
        for (String name : new TreeSet<String>(env.stringPropertyNames())) {
            sb.append("E:").append(hex(name)).append(':').append(hex(env.getProperty(name)));
            sb.append('\n');
        }
        String cwd = ctx.getWorkingDirectory();
        if (cwd != null) {
            sb.append("D:").append(hex(cwd)).append('\n');
        }
        ctx.out.print(sb);
        ctx.out.flush();
    }

    private static String hex(String s) {
        StringBuilder out = new StringBuilder();
        for (byte b : s.getBytes(StandardCharsets.UTF_8)) {
            out.append(Character.forDigit((b >> 4) & 0xF, 16));
            out.append(Character.forDigit(b & 0xF, 16));
        }
        return out.toString();
    }
}
