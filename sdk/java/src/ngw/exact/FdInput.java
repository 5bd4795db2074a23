/**
 * The worker channel's input in exact mode: bytes read with {@code recvmsg}, and the
 * descriptors that came with them, each remembered with the stream offset of the first byte
 * it arrived with (the kernel attaches them to the first byte of ngd's {@code sendmsg}, the
 * session's {@code s} chunk or first header chunk, docs/ngw.md §15.4).
 */
package ngw.exact;

import java.io.IOException;
import java.io.InputStream;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;

/** See the file comment. */
final class FdInput extends InputStream {
    private record Arrival(long offset, int[] fds) {}

    private final int fd;
    private final byte[] buf = new byte[64 * 1024];
    private final ArrayDeque<Arrival> arrivals = new ArrayDeque<>();
    private int pos;
    private int end;
    private long delivered;
    private long bufferStart;

    FdInput(int fd) {
        this.fd = fd;
    }

    /** The stream offset of the next byte this stream will hand out. */
    long offset() {
        return delivered;
    }

    /**
     * The descriptors that arrived with the byte at {@code offset}; any that arrived earlier
     * and were never taken are closed (they belong to no session).
     */
    int[] take(long offset) {
        List<Integer> out = new ArrayList<>();
        while (!arrivals.isEmpty() && arrivals.peek().offset <= offset) {
            Arrival a = arrivals.poll();
            for (int f : a.fds) {
                if (a.offset == offset) {
                    out.add(f);
                } else {
                    Posix.closeQuietly(f);
                }
            }
        }
        return out.stream().mapToInt(Integer::intValue).toArray();
    }

    @Override
    public int read() throws IOException {
        byte[] one = new byte[1];
        return read(one, 0, 1) < 0 ? -1 : one[0] & 0xFF;
    }

    @Override
    public int read(byte[] b, int off, int len) throws IOException {
        if (pos == end) {
            Posix.Received r = Posix.recv(fd, buf);
            if (r.length() == 0) {
                for (int f : r.fds()) {
                    Posix.closeQuietly(f);
                }
                return -1;
            }
            bufferStart = delivered;
            pos = 0;
            end = r.length();
            if (r.fds().length > 0) {
                arrivals.add(new Arrival(bufferStart, r.fds()));
            }
        }
        int n = Math.min(len, end - pos);
        System.arraycopy(buf, pos, b, off, n);
        pos += n;
        delivered += n;
        return n;
    }
}
