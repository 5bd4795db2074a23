package ngbench;

import com.martiansoftware.nailgun.NGContext;
import java.util.Arrays;

/**
 * Writes BYTES bytes of "y\n" to stdout, in writes of up to 128 KiB (each write becomes one
 * stdout chunk): the Java server's equivalent of ngd's `ng-yes BYTES`, an output probe.
 * BYTES takes the same binary suffixes as ng-yes: 1048576, 64K, 256M, 1G.
 */
public class Yes {
    public static void nailMain(NGContext ctx) {
        String[] args = ctx.getArgs();
        long total;
        try {
            total = parseSize(args[0]);
        } catch (RuntimeException e) {
            ctx.err.println("usage: ngbench.Yes BYTES (e.g. 1048576, 64K, 64M, 1G)");
            ctx.err.flush();
            ctx.exit(64);
            return;
        }
        byte[] block = new byte[128 << 10];
        for (int i = 0; i < block.length; i += 2) {
            block[i] = 'y';
            block[i + 1] = '\n';
        }
        long left = total;
        while (left > 0) {
            int n = (int) Math.min(left, block.length);
            ctx.out.write(block, 0, n);
            left -= n;
        }
        ctx.out.flush();
    }

    static long parseSize(String s) {
        long mult = 1;
        switch (Character.toUpperCase(s.charAt(s.length() - 1))) {
            case 'K': mult = 1L << 10; break;
            case 'M': mult = 1L << 20; break;
            case 'G': mult = 1L << 30; break;
            default: break;
        }
        String digits = mult == 1 ? s : s.substring(0, s.length() - 1);
        return Math.multiplyExact(Long.parseLong(digits), mult);
    }
}
