/**
 * Why the client is considered gone (1.x API). ngd's worker learns of a disconnect from ngd's
 * hangup, which covers a closed or broken connection and a heartbeat timeout alike, and
 * reports it as {@link #SOCKET_ERROR}.
 */
package com.facebook.nailgun;

/** See the file comment. */
public enum NGClientDisconnectReason {
    SOCKET_TIMEOUT,
    HEARTBEAT,
    SOCKET_ERROR,
    SESSION_SHUTDOWN,
    INTERNAL_ERROR
}
