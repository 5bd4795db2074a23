/** A nail run on a new instance: {@code new X().nailMain(args)} (1.x API). */
package com.facebook.nailgun;

/** See the file comment. */
public interface NonStaticNail {
    void nailMain(String[] args);
}
