/**
 * The context a nail of the 0.9 Nailgun API gets: the session's arguments, the client's
 * environment and working directory, the session's streams, its exit, and the client's
 * connection. Written for ngd's JVM worker from the API's public signatures.
 */
package com.martiansoftware.nailgun;

import java.io.InputStream;
import java.io.PrintStream;
import java.net.InetAddress;
import java.util.Properties;

import ngw.NailSession;

/** See the file comment. */
public class NGContext {
    /** The session's stdin. */
    public InputStream in;
    /** The session's stdout. */
    public PrintStream out;
    /** The session's stderr. */
    public PrintStream err;

    private final NailSession session;
    private String[] args;
    private String command;

    /** A context for {@code session} (made by the worker). */
    public NGContext(NailSession session) {
        this.session = session;
        this.in = session.in();
        this.out = session.out();
        this.err = session.err();
        this.args = session.args();
        this.command = session.command();
    }

    public String[] getArgs() {
        return args;
    }

    public void setArgs(String[] args) {
        this.args = args;
    }

    public String getCommand() {
        return command;
    }

    public void setCommand(String command) {
        this.command = command;
    }

    /** The client's environment, as Nailgun gives it (not applied to {@code System.getenv}). */
    public Properties getEnv() {
        return session.env();
    }

    /** The client's working directory (not applied to the JVM's). */
    public String getWorkingDirectory() {
        return session.workingDirectory();
    }

    public String getFileSeparator() {
        return session.env().getProperty("NAILGUN_FILESEPARATOR", java.io.File.separator);
    }

    public String getPathSeparator() {
        return session.env().getProperty("NAILGUN_PATHSEPARATOR", java.io.File.pathSeparator);
    }

    /** The client's address: ngd serves local clients only, so the loopback address. */
    public InetAddress getInetAddress() {
        return InetAddress.getLoopbackAddress();
    }

    /** The client's port: none over ngd's worker channel. */
    public int getPort() {
        return 0;
    }

    public NGServer getNGServer() {
        return new NGServer(session.worker());
    }

    /** Ends the session with {@code exitCode}: the first exit wins; later output is dropped. */
    public void exit(int exitCode) {
        session.exit(exitCode);
    }

    /** Passes: ngd accepts only its own user's local connections. */
    public void assertLoopbackClient() {}

    /** Passes: ngd accepts only its own user's local connections. */
    public void assertLocalClient() {}

    public boolean isClientConnected() {
        return session.isClientConnected();
    }

    /** Calls {@code listener} when the client disconnects (at once if it has already). */
    public void addClientListener(NGClientListener listener) {
        session.onDisconnect(listener, () -> listener.clientDisconnected());
    }

    public void removeClientListener(NGClientListener listener) {
        session.removeDisconnect(listener);
    }

    public void removeAllClientListeners() {
        session.removeAllDisconnects();
    }

    /** Calls {@code listener} about once a second while the client is connected. */
    public void addHeartbeatListener(NGHeartbeatListener listener) {
        session.onHeartbeat(listener, listener::heartbeatReceived);
    }

    public void removeHeartbeatListener(NGHeartbeatListener listener) {
        session.removeHeartbeat(listener);
    }
}
