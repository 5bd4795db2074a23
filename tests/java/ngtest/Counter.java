package ngtest;

/** A plain `main` with a static counter: shared mode keeps it between runs. */
public class Counter {
    private static int runs;

    public static void main(String[] args) {
        runs++;
        System.out.println("run " + runs);
    }
}
