/**
 * What the {@code NGContext} classes of both Nailgun API generations share: a nail's view of
 * its session (arguments, the client's environment and directory, the session's streams,
 * its exit, the client's connection). Each generation's {@code NGContext} extends it with
 * its own listener and server types; the public fields and methods here are found through
 * the subclass, as nails compiled against either API expect.
 */
package ngw.api;

import java.io.InputStream;
import java.io.PrintStream;
import java.net.InetAddress;
import java.util.Properties;

import ngw.NailSession;

/** See the file comment. */
public class ContextBase {
    /** The session's stdin. */
    public InputStream in;
    /** The session's stdout. */
    public PrintStream out;
    /** The session's stderr. */
    public PrintStream err;

    /** The session. */
    protected final NailSession session;
    private String[] args;
    private String command;

    /** A context for {@code session} (made by the worker). */
    protected ContextBase(NailSession session) {
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

    public void removeAllClientListeners() {
        session.removeAllDisconnects();
    }
}
