package ngtest;

import com.martiansoftware.nailgun.NGContext;

/**
 * Exits with the code given as the only argument, after one line on stdout and one on
 * stderr (so a test also sees the two streams kept apart).
 *
 * Nailgun 0.9.3 quirk: `ctx.exit(n)` sends `X n`, and returning from `nailMain` then
 * sends a second `X 0`. Clients act on the first `X`, which this nail relies on.
 */
public class Exit {
    public static void nailMain(NGContext ctx) {
        int code = Integer.parseInt(ctx.getArgs()[0]);
        ctx.out.println("exit " + code);
        ctx.err.println("exiting with " + code);
        ctx.out.flush();
        ctx.err.flush();
        ctx.exit(code);
    }
}
