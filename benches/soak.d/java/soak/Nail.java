package soak;

import com.martiansoftware.nailgun.NGContext;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;

/**
 * The JVM nail of the soak (benches/soak), served by `ngw-java --nails` as `soak-nail`.
 * Takes `ID CODE`, reads its stdin to the end and answers with output that depends on
 * every input, so the soak can check each invocation byte for byte:
 *
 * <pre>
 *   stdout  "nail ID LEN\n" + stdin
 *   stderr  "nail ID\n"
 *   exit    CODE
 * </pre>
 */
public class Nail {
    public static void nailMain(NGContext ctx) throws IOException {
        String id = ctx.getArgs()[0];
        int code = Integer.parseInt(ctx.getArgs()[1]);
        ByteArrayOutputStream in = new ByteArrayOutputStream();
        byte[] buf = new byte[65536];
        int n;
        while ((n = ctx.in.read(buf)) != -1) {
            in.write(buf, 0, n);
        }
        byte[] head = ("nail " + id + " " + in.size() + "\n").getBytes(StandardCharsets.US_ASCII);
        ctx.out.write(head);
        in.writeTo(ctx.out);
        ctx.out.flush();
        ctx.err.write(("nail " + id + "\n").getBytes(StandardCharsets.US_ASCII));
        ctx.err.flush();
        if (code != 0) {
            ctx.exit(code);
        }
    }
}
