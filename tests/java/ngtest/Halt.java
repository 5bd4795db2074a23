package ngtest;

import com.martiansoftware.nailgun.NGContext;

/** `Runtime.getRuntime().halt(args[0])` after a line on stdout. */
public class Halt {
    public static void nailMain(NGContext ctx) {
        System.out.println("halting");
        System.out.flush();
        Runtime.getRuntime().halt(Integer.parseInt(ctx.getArgs()[0]));
    }
}
