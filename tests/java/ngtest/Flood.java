package ngtest;

import com.martiansoftware.nailgun.NGContext;

/** Writes `args[0]` bytes of a repeating pattern to stdout, 64 KiB at a time. */
public class Flood {
    public static void nailMain(NGContext ctx) {
        long total = Long.parseLong(ctx.getArgs()[0]);
        byte[] block = new byte[65536];
        for (int i = 0; i < block.length; i++) {
            block[i] = (byte) ('a' + i % 26);
        }
        long left = total;
        while (left > 0) {
            int n = (int) Math.min(left, block.length);
            System.out.write(block, 0, n);
            left -= n;
        }
        System.out.flush();
    }
}
