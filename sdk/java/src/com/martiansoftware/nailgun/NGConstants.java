/** Nailgun's protocol constants (0.9 API; see {@link ngw.api.Constants}). */
package com.martiansoftware.nailgun;

/** See the file comment. */
public class NGConstants extends ngw.api.Constants {
    public NGConstants() {}
}
