/**
 * Reads chunks from a stream, checking each length against the cap before allocating.
 */
package ngw.wire;

import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;

/** Reads whole chunks; one reader per stream, never shared between threads. */
public final class ChunkReader {
    /** A chunk whose declared length is over the cap, or negative. */
    public static final class TooLarge extends IOException {
        private static final long serialVersionUID = 1L;

        TooLarge(long len, int cap) {
            super("chunk of " + len + " bytes is over the cap of " + cap);
        }
    }

    private final InputStream in;
    private final int cap;
    private final byte[] header = new byte[5];

    public ChunkReader(InputStream in, int cap) {
        this.in = in;
        this.cap = cap;
    }

    /** The next chunk, or null at a clean end of stream (between chunks). */
    public Chunk read() throws IOException {
        int got = fill(header, 0);
        if (got == 0) {
            return null;
        }
        if (got < header.length) {
            throw new EOFException("end of stream inside a chunk header");
        }
        long len = ((header[0] & 0xFFL) << 24) | ((header[1] & 0xFF) << 16) | ((header[2] & 0xFF) << 8)
                | (header[3] & 0xFF);
        if (len > cap) {
            throw new TooLarge(len, cap);
        }
        byte[] payload = new byte[(int) len];
        if (fill(payload, 0) < payload.length) {
            throw new EOFException("end of stream inside a chunk");
        }
        return new Chunk(header[4], payload);
    }

    private int fill(byte[] buf, int off) throws IOException {
        int at = off;
        while (at < buf.length) {
            int n = in.read(buf, at, buf.length - at);
            if (n < 0) {
                break;
            }
            at += n;
        }
        return at - off;
    }
}
