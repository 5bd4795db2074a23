package ngtest;

import com.martiansoftware.nailgun.NGContext;

/**
 * Prints, one per line: the arguments as `[arg]`, then for each argument that names an
 * environment entry the client sent, `NAME=value` from `getEnv()`, then the client's working
 * directory from `getWorkingDirectory()`.
 */
public class Props {
    public static void nailMain(NGContext ctx) {
        for (String a : ctx.getArgs()) {
            ctx.out.println("[" + a + "]");
        }
        for (String a : ctx.getArgs()) {
            String v = ctx.getEnv().getProperty(a);
            if (v != null) {
                ctx.out.println(a + "=" + v);
            }
        }
        ctx.out.println("cwd=" + ctx.getWorkingDirectory());
        ctx.out.flush();
    }
}
