package ngtest;

import com.martiansoftware.nailgun.NGContext;

/**
 * Copies stdin to stdout byte for byte until end of input, then returns (exit 0).
 *
 * Binary safe: it never decodes what it copies. Each read hands back at most one stdin
 * chunk, and each write becomes one stdout chunk, so the copy exercises the client's
 * credit-based stdin (one `0` per `S`) and its output demultiplexing together.
 */
public class Echo {
    public static void nailMain(NGContext ctx) throws java.io.IOException {
        byte[] buf = new byte[16384];
        int n;
        while ((n = ctx.in.read(buf)) != -1) {
            ctx.out.write(buf, 0, n);
        }
        ctx.out.flush();
    }
}
