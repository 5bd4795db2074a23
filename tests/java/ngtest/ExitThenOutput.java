package ngtest;

import com.martiansoftware.nailgun.NGContext;

/** `ctx.exit(3)`, then more output: the client stops at the exit. */
public class ExitThenOutput {
    public static void nailMain(NGContext ctx) {
        ctx.out.println("before");
        ctx.out.flush();
        ctx.exit(3);
        ctx.out.println("after");
        ctx.err.println("after on stderr");
        ctx.out.flush();
    }
}
