/**
 * A session's stdin in the shared JVM: lazy credit (docs/ngw.md §7.3). A read that finds the
 * buffer empty asks ngd for input with one {@code S} and waits for the {@code 0} or {@code .}
 * that answers it; at most one {@code S} is outstanding, and none after end of file.
 */
package ngw.shared;

import java.io.IOException;
import java.io.InputStream;
import java.io.InterruptedIOException;
import java.util.ArrayDeque;

/** See the file comment. */
final class SessionInput extends InputStream {
    /** Asks for one more stdin chunk. */
    interface Credit {
        void request() throws IOException;
    }

    private Credit credit;
    private final ArrayDeque<byte[]> chunks = new ArrayDeque<>();
    private int offset;
    private boolean requested;
    private boolean eof;

    /** How this stream asks for input (set once, before anything can read from it). */
    synchronized void bind(Credit credit) {
        this.credit = credit;
    }

    /** A {@code 0} chunk arrived. */
    synchronized void data(byte[] payload) {
        requested = false;
        if (payload.length > 0 && !eof) {
            chunks.add(payload);
        }
        notifyAll();
    }

    /** A {@code .} arrived, or the session is over: reads see end of file once drained. */
    synchronized void end() {
        requested = false;
        eof = true;
        notifyAll();
    }

    @Override
    public int read() throws IOException {
        byte[] one = new byte[1];
        int n = read(one, 0, 1);
        return n < 0 ? -1 : one[0] & 0xFF;
    }

    @Override
    public synchronized int read(byte[] b, int off, int len) throws IOException {
        if (len == 0) {
            return 0;
        }
        while (chunks.isEmpty()) {
            if (eof) {
                return -1;
            }
            if (!requested) {
                requested = true;
                credit.request();
            }
            try {
                wait();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new InterruptedIOException("interrupted while reading stdin");
            }
        }
        byte[] head = chunks.peek();
        int n = Math.min(len, head.length - offset);
        System.arraycopy(head, offset, b, off, n);
        offset += n;
        if (offset == head.length) {
            chunks.poll();
            offset = 0;
        }
        return n;
    }

    @Override
    public synchronized int available() {
        int n = 0;
        for (byte[] c : chunks) {
            n += c.length;
        }
        return n - offset;
    }
}
