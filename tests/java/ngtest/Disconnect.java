package ngtest;

import com.martiansoftware.nailgun.NGClientListener;
import com.martiansoftware.nailgun.NGContext;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;

/**
 * Adds a client listener that writes "disconnected" to the file `args[0]`, prints "ready",
 * then waits up to 20 s for the client to go (so a test can kill the client).
 */
public class Disconnect {
    public static void nailMain(NGContext ctx) throws InterruptedException {
        Path marker = Path.of(ctx.getArgs()[0]);
        ctx.addClientListener(new NGClientListener() {
            @Override
            public void clientDisconnected() {
                try {
                    Files.writeString(marker, "disconnected\n");
                } catch (IOException e) {
                    throw new RuntimeException(e);
                }
            }
        });
        ctx.out.println("ready");
        ctx.out.flush();
        for (int i = 0; i < 200 && ctx.isClientConnected(); i++) {
            Thread.sleep(100);
        }
    }
}
