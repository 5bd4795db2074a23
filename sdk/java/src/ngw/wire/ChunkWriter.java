/**
 * Writes chunks to the channel from any thread, each chunk in one write, and keeps the
 * outbound session selection of the {@code mux} extension (docs/ngw.md §15.1): a session
 * chunk for another session than the last one written is preceded by {@code s <id>}, in the
 * same write.
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
        int at = put(0, type, payload, 0, payload.length);
        out.write(buf, 0, at);
        out.flush();
    }

    /**
     * Writes a session chunk for session {@code id}, split at {@link #MAX_OUTPUT}: one write
     * per piece, the first one with the {@code s} before it when it is needed.
     */
    public synchronized void session(long id, byte type, byte[] payload, int off, int len) throws IOException {
        int at = 0;
        if (mux && id != selected) {
            byte[] sel = Long.toString(id).getBytes(StandardCharsets.US_ASCII);
            at = put(0, Chunk.SELECT, sel, 0, sel.length);
            selected = id;
        }
        do {
            int n = Math.min(len, MAX_OUTPUT);
            at = put(at, type, payload, off, n);
            out.write(buf, 0, at);
            at = 0;
            off += n;
            len -= n;
        } while (len > 0);
        out.flush();
    }

    /** Puts a chunk into the buffer at {@code at}, growing it as needed; returns its end. */
    private int put(int at, byte type, byte[] payload, int off, int len) {
        int end = at + 5 + len;
        if (buf.length < end) {
            buf = java.util.Arrays.copyOf(buf, Math.max(end, Math.min(2 * buf.length, 5 + 32 + MAX_OUTPUT)));
        }
        buf[at] = (byte) (len >>> 24);
        buf[at + 1] = (byte) (len >>> 16);
        buf[at + 2] = (byte) (len >>> 8);
        buf[at + 3] = (byte) len;
        buf[at + 4] = type;
        System.arraycopy(payload, off, buf, at + 5, len);
        return end;
    }
}
