package ngtest;

import com.martiansoftware.nailgun.NGContext;

/** Prints "started", then never returns and ignores interrupts (a hostile nail). */
public class Forever {
    public static void nailMain(NGContext ctx) {
        ctx.out.println("started");
        ctx.out.flush();
        while (true) {
            try {
                Thread.sleep(1000);
            } catch (InterruptedException e) {
                // Ignored on purpose.
            }
        }
    }
}
