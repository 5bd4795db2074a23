package ngtest;

/** A plain `main`: prints "sleeping", then sleeps `args[0]` ms (default 30000). */
public class SleepMain {
    public static void main(String[] args) throws InterruptedException {
        System.out.println("sleeping");
        System.out.flush();
        Thread.sleep(args.length > 0 ? Long.parseLong(args[0]) : 30_000);
        System.out.println("slept");
    }
}
