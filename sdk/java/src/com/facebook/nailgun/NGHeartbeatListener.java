/** Told about the client's heartbeats (1.x API; ngd's worker calls it once a second). */
package com.facebook.nailgun;

/** See the file comment. */
public interface NGHeartbeatListener {
    void heartbeatReceived();
}
