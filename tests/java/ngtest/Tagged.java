package ngtest;

import com.martiansoftware.nailgun.NGContext;

/** Prints `args[0]` and a counter on `args[1]` lines, pausing a little, on `System.out`. */
public class Tagged {
    public static void nailMain(NGContext ctx) throws InterruptedException {
        String tag = ctx.getArgs()[0];
        int lines = Integer.parseInt(ctx.getArgs()[1]);
        for (int i = 0; i < lines; i++) {
            System.out.println(tag + " " + i);
            if (i % 10 == 0) {
                Thread.sleep(5);
            }
        }
    }
}
