package t;

import com.martiansoftware.nailgun.NGContext;

/** Prints its arguments and working directory to stdout, and one line to stderr. */
public class Args {
    public static void nailMain(NGContext ctx) {
        for (String a : ctx.getArgs()) {
            ctx.out.println("arg[" + a + "]");
        }
        ctx.out.println("cwd[" + ctx.getWorkingDirectory() + "]");
        ctx.err.println("args: " + ctx.getArgs().length);
    }
}
