/** A nail run on a new instance: {@code new X().nailMain(args)} (0.9 API). */
package com.martiansoftware.nailgun;

/** See the file comment. */
public interface NonStaticNail {
    void nailMain(String[] args);
}
