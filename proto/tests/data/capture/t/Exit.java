package t;

/** Prints a line, then exits with the code given as the first argument. */
public class Exit {
    public static void main(String[] args) {
        System.out.println("exiting");
        System.out.flush();
        System.exit(Integer.parseInt(args[0]));
    }
}
