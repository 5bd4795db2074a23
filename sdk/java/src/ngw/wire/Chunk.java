/**
 * One Nailgun chunk as the worker protocol frames it: a 4-byte big-endian payload length,
 * a type byte, the payload. The chunk types of docs/ngw.md §3 are constants here.
 */
package ngw.wire;

import java.nio.charset.StandardCharsets;

/** A chunk read from the channel. */
public record Chunk(byte type, byte[] payload) {
    public static final byte ARG = 'A';
    public static final byte ENV = 'E';
    public static final byte DIR = 'D';
    public static final byte COMMAND = 'C';
    public static final byte STDIN = '0';
    public static final byte STDIN_EOF = '.';
    public static final byte STDOUT = '1';
    public static final byte STDERR = '2';
    public static final byte SEND_INPUT = 'S';
    public static final byte EXIT = 'X';
    public static final byte HEARTBEAT = 'H';
    public static final byte LONG_ARG = 'L';
    public static final byte HELLO = 'h';
    public static final byte PING = 'p';
    public static final byte PONG = 'o';
    public static final byte INTERRUPT = 'i';
    public static final byte QUIT = 'q';
    public static final byte SELECT = 's';
    public static final byte NOTICE = 'n';
    public static final byte TAKEN = 't';
    public static final byte STOPPED = 'z';

    /** The payload as UTF-8 text. */
    public String text() {
        return new String(payload, StandardCharsets.UTF_8);
    }
}
