package ngtest;

import com.martiansoftware.nailgun.NGContext;
import java.io.IOException;

/** Reads stdin to its end through `System.in`, then prints the byte count and a checksum. */
public class StdinSum {
    public static void nailMain(NGContext ctx) throws IOException {
        byte[] buf = new byte[1000];
        long count = 0;
        long sum = 0;
        int n;
        while ((n = System.in.read(buf)) != -1) {
            for (int i = 0; i < n; i++) {
                sum = sum * 31 + (buf[i] & 0xFF);
            }
            count += n;
        }
        System.out.println("bytes=" + count + " sum=" + sum);
    }
}
