/**
 * The context a nail of the 1.x Nailgun API gets (see {@link ngw.api.ContextBase}), with
 * this generation's listener and server types. Written for ngd's JVM worker from the API's
 * public signatures.
 */
package com.facebook.nailgun;

import ngw.NailSession;

/** See the file comment. */
public class NGContext extends ngw.api.ContextBase {
    /** A context for {@code session} (made by the worker). */
    public NGContext(NailSession session) {
        super(session);
    }

    public NGServer getNGServer() {
        return new NGServer(session.worker());
    }

    /** Calls {@code listener} when the client disconnects (at once if it has already). */
    public void addClientListener(NGClientListener listener) {
        session.onDisconnect(listener, () -> listener.clientDisconnected(NGClientDisconnectReason.SOCKET_ERROR));
    }

    public void removeClientListener(NGClientListener listener) {
        session.removeDisconnect(listener);
    }

    /** Calls {@code listener} about once a second while the client is connected. */
    public void addHeartbeatListener(NGHeartbeatListener listener) {
        session.onHeartbeat(listener, listener::heartbeatReceived);
    }

    public void removeHeartbeatListener(NGHeartbeatListener listener) {
        session.removeHeartbeat(listener);
    }
}
