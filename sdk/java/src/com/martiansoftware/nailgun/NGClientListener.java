/** Told when the client disconnects (0.9 API). */
package com.martiansoftware.nailgun;

/** See the file comment. */
public interface NGClientListener {
    void clientDisconnected();
}
