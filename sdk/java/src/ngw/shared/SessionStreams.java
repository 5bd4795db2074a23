/**
 * A session's standard streams, made before its session is known: the thread that reads the
 * channel makes them as it takes over the reading, while it waits for the next header, so
 * that making them (two {@code PrintStream}s, each with its encoder and buffers) is off the
 * path from the {@code C} to the program. {@link #bind} gives them their session, once.
 */
package ngw.shared;

import java.io.PrintStream;

import ngw.wire.Chunk;

/** See the file comment. */
final class SessionStreams {
    final SessionOutput outStream = new SessionOutput(Chunk.STDOUT);
    final SessionOutput errStream = new SessionOutput(Chunk.STDERR);
    final PrintStream out = new PrintStream(outStream, true, Streams.outCharset());
    final PrintStream err = new PrintStream(errStream, true, Streams.errCharset());
    final SessionInput in = new SessionInput();

    /** Binds the streams to {@code session}; its stdin asks for input with {@code credit}. */
    void bind(Session session, SessionInput.Credit credit) {
        outStream.bind(session);
        errStream.bind(session);
        in.bind(credit);
    }
}
