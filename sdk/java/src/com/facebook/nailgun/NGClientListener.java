/** Told when the client disconnects, and why (1.x API). */
package com.facebook.nailgun;

/** See the file comment. */
public interface NGClientListener {
    void clientDisconnected(NGClientDisconnectReason reason);
}
