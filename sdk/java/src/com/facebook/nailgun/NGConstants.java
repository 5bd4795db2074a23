/** Nailgun's protocol constants (1.x API; see {@link ngw.api.Constants}). */
package com.facebook.nailgun;

/** See the file comment. */
public class NGConstants extends ngw.api.Constants {
    public NGConstants() {}
}
