package ngtest;

import com.martiansoftware.nailgun.NGContext;

/**
 * Sleeps for the number of milliseconds given as the only argument, writing one line
 * before and one after.
 *
 * The line after says whether the server still considered the client connected when the
 * nail woke up: a server that missed the client's heartbeats (the server's heartbeat
 * timeout is shorter than the sleep in the heartbeat tests) reports `false`.
 */
public class Sleep {
    public static void nailMain(NGContext ctx) throws InterruptedException {
        long millis = Long.parseLong(ctx.getArgs()[0]);
        ctx.out.println("sleeping " + millis);
        ctx.out.flush();
        Thread.sleep(millis);
        ctx.out.println("slept, client connected: " + ctx.isClientConnected());
        ctx.out.flush();
    }
}
