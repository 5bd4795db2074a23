/**
 * A session's stdout or stderr in the shared JVM: every write becomes {@code 1} or {@code 2}
 * chunks for that session. After the session's exit, writes are dropped (the client has its
 * {@code X}); a broken channel drops them too, since the worker is then going away.
 */
package ngw.shared;

import java.io.IOException;
import java.io.OutputStream;

/** See the file comment. */
final class SessionOutput extends OutputStream {
    private final byte type;
    private volatile Session session;

    SessionOutput(byte type) {
        this.type = type;
    }

    /** The session this stream writes for (set once, before anything can write to it). */
    void bind(Session session) {
        this.session = session;
    }

    @Override
    public void write(int b) {
        write(new byte[] {(byte) b}, 0, 1);
    }

    @Override
    public void write(byte[] b, int off, int len) {
        if (len > 0) {
            session.output(type, b, off, len);
        }
    }

    @Override
    public void flush() throws IOException {}

    @Override
    public void close() {}
}
