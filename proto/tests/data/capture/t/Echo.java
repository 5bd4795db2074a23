package t;

/** Copies stdin to stdout, reading at most 1000 bytes at a time. */
public class Echo {
    public static void main(String[] args) throws Exception {
        byte[] buf = new byte[1000];
        int n;
        while ((n = System.in.read(buf)) > 0) {
            System.out.write(buf, 0, n);
            System.out.flush();
        }
    }
}
