package ngtest;

import com.martiansoftware.nailgun.NonStaticNail;

/** A `NonStaticNail`: a new instance per run, so the counter is always 1. */
public class NonStatic implements NonStaticNail {
    private int runs;

    @Override
    public void nailMain(String[] args) {
        runs++;
        System.out.println("instance run " + runs + " args " + String.join(",", args));
    }
}
