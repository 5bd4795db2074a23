/**
 * {@code System.in}, {@code System.out} and {@code System.err} in the shared JVM: each
 * dispatches to the session of the calling thread (the session's threads and the threads
 * they start inherit it), and to the worker's own streams (its log) on any other thread.
 */
package ngw.shared;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.PrintStream;
import java.nio.charset.Charset;

/** See the file comment. */
final class Streams {
    private static PrintStream workerOut;
    private static PrintStream workerErr;
    private static InputStream workerIn;
    private static Charset outCharset;
    private static Charset errCharset;

    private Streams() {}

    /** Replaces the three standard streams; the originals stay the worker's. */
    static synchronized void install() {
        if (workerOut != null) {
            return;
        }
        workerOut = System.out;
        workerErr = System.err;
        workerIn = System.in;
        outCharset = charset(System.out);
        errCharset = charset(System.err);
        System.setOut(new PrintStream(new Dispatch(true), true, outCharset));
        System.setErr(new PrintStream(new Dispatch(false), true, errCharset));
        System.setIn(new DispatchIn());
    }

    static PrintStream workerOut() {
        return workerOut;
    }

    static PrintStream workerErr() {
        return workerErr;
    }

    static InputStream workerIn() {
        return workerIn;
    }

    /** The charset the JVM's standard output encodes with. */
    static Charset outCharset() {
        return outCharset;
    }

    /** The charset the JVM's standard error encodes with. */
    static Charset errCharset() {
        return errCharset;
    }

    /** The charset a standard stream encodes with (JDK 18+ says; 17 uses the default). */
    static Charset charset(PrintStream s) {
        try {
            return (Charset) PrintStream.class.getMethod("charset").invoke(s);
        } catch (ReflectiveOperationException e) {
            return Charset.defaultCharset();
        }
    }

    private static final class Dispatch extends OutputStream {
        private final boolean out;

        Dispatch(boolean out) {
            this.out = out;
        }

        private OutputStream target() {
            Session s = Session.current();
            if (s != null) {
                return out ? s.outStream() : s.errStream();
            }
            return out ? workerOut : workerErr;
        }

        @Override
        public void write(int b) throws IOException {
            target().write(b);
        }

        @Override
        public void write(byte[] b, int off, int len) throws IOException {
            target().write(b, off, len);
        }

        @Override
        public void flush() throws IOException {
            target().flush();
        }
    }

    private static final class DispatchIn extends InputStream {
        private InputStream target() {
            Session s = Session.current();
            return s != null ? s.in() : workerIn;
        }

        @Override
        public int read() throws IOException {
            return target().read();
        }

        @Override
        public int read(byte[] b, int off, int len) throws IOException {
            return target().read(b, off, len);
        }

        @Override
        public int available() throws IOException {
            return target().available();
        }
    }
}
