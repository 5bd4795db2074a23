/**
 * Thrown by the exit hook in a session's thread that called {@code System.exit}, {@code
 * Runtime.exit} or {@code Runtime.halt}: the session has ended with that status, and the
 * throw unwinds the thread instead of ending the JVM.
 */
package ngw;

/** See the file comment. Carries no stack trace: it is control flow, not an error. */
public final class ExitSignal extends Error {
    private static final long serialVersionUID = 1L;
    private final int status;

    public ExitSignal(int status) {
        super("exit(" + status + ")", null, false, false);
        this.status = status;
    }

    /** The status the program exited with. */
    public int status() {
        return status;
    }
}
