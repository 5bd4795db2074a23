/**
 * Writes chunks to the channel from any thread, each chunk in one write, and keeps the
 * outbound session selection of the {@code mux} extension (docs/ngw.md §15.1): a session
 * chunk for another session than the last one written is preceded by {@code s <id>}.
 */
package ngw.wire;

import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;

/** Thread-safe chunk writer. */
public final class ChunkWriter {
    /** The largest output payload written in one chunk; longer writes are split. */
    public static final int MAX_OUTPUT = 64 * 1024;

    private final OutputStream out;
    private final boolean mux;
    private long selected = -1;
    private byte[] buf = new byte[5 + 256];

    public ChunkWriter(OutputStream out, boolean mux) {
        this.out = out;
        this.mux = mux;
    }

    /** Writes a chunk that belongs to no session (hello, pong, notice). */
    public synchronized void control(byte type, byte[] payload) throws IOException {
        write(type, payload, 0, payload.length);
        out.flush();
    }

    /** Writes a session chunk for session {@code id}, split at {@link #MAX_OUTPUT}. */
    public synchronized void session(long id, byte type, byte[] payload, int off, int len) throws IOException {
        if (mux && id != selected) {
            byte[] sel = Long.toString(id).getBytes(StandardCharsets.US_ASCII);
            write(Chunk.SELECT, sel, 0, sel.length);
            selected = id;
        }
        do {
            int n = Math.min(len, MAX_OUTPUT);
            write(type, payload, off, n);
            off += n;
            len -= n;
        } while (len > 0);
        out.flush();
    }

    private void write(byte type, byte[] payload, int off, int len) throws IOException {
        if (buf.length < 5 + len) {
            buf = new byte[Math.max(5 + len, Math.min(2 * buf.length, 5 + MAX_OUTPUT))];
        }
        buf[0] = (byte) (len >>> 24);
        buf[1] = (byte) (len >>> 16);
        buf[2] = (byte) (len >>> 8);
        buf[3] = (byte) len;
        buf[4] = type;
        System.arraycopy(payload, off, buf, 5, len);
        out.write(buf, 0, 5 + len);
    }
}
