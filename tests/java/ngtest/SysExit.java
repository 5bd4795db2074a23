package ngtest;

import com.martiansoftware.nailgun.NGContext;

/**
 * `System.exit(args[0])`, after a line on stdout; with a second argument `thread`, the exit
 * is called from a thread the nail started (and the nail waits for it).
 */
public class SysExit {
    public static void nailMain(NGContext ctx) throws InterruptedException {
        int code = Integer.parseInt(ctx.getArgs()[0]);
        System.out.println("exiting " + code);
        System.out.flush();
        if (ctx.getArgs().length > 1 && ctx.getArgs()[1].equals("thread")) {
            Thread t = new Thread(() -> {
                System.out.println("from a thread");
                System.out.flush();
                System.exit(code);
            });
            t.start();
            t.join();
            Thread.sleep(60_000);
        } else {
            System.exit(code);
        }
        System.out.println("not reached");
    }
}
