package t;

/** Sleeps for the given number of milliseconds, then prints a line. */
public class Sleep {
    public static void main(String[] args) throws Exception {
        Thread.sleep(Long.parseLong(args[0]));
        System.out.println("slept");
    }
}
