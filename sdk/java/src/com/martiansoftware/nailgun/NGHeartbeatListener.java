/** Told about the client's heartbeats (0.9 API; ngd's worker calls it once a second). */
package com.martiansoftware.nailgun;

/** See the file comment. */
public interface NGHeartbeatListener {
    void heartbeatReceived();
}
