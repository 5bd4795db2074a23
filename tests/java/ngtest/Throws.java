package ngtest;

import com.martiansoftware.nailgun.NGContext;

/** Throws an uncaught exception after a line on stdout. */
public class Throws {
    public static void nailMain(NGContext ctx) {
        ctx.out.println("about to throw");
        ctx.out.flush();
        throw new IllegalStateException("boom from a nail");
    }
}
