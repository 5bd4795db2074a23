/**
 * Nailgun's protocol constants, which both API generations' {@code NGConstants} name (a
 * constant is found through the subclass).
 */
package ngw.api;

/** See the file comment. */
public class Constants {
    public static final int DEFAULT_PORT = 2113;
    public static final int EXIT_EXCEPTION = 899;
    public static final int EXIT_NOSUCHCOMMAND = 898;
    public static final byte CHUNKTYPE_ARGUMENT = 'A';
    public static final byte CHUNKTYPE_ENVIRONMENT = 'E';
    public static final byte CHUNKTYPE_COMMAND = 'C';
    public static final byte CHUNKTYPE_WORKINGDIRECTORY = 'D';
    public static final byte CHUNKTYPE_STDIN = '0';
    public static final byte CHUNKTYPE_STDIN_EOF = '.';
    public static final byte CHUNKTYPE_STDOUT = '1';
    public static final byte CHUNKTYPE_STDERR = '2';
    public static final byte CHUNKTYPE_EXIT = 'X';
    public static final byte CHUNKTYPE_SENDINPUT = 'S';
    public static final byte CHUNKTYPE_HEARTBEAT = 'H';
    public static final String VERSION = "ngw-java";
    public static final short HEARTBEAT_INTERVAL_MILLIS = 1000;
    public static final short HEARTBEAT_TIMEOUT_MILLIS = 10000;
    public static final short MAXIMUM_CHUNK_LENGTH = 2048;

    protected Constants() {}

    public static String getVersion() {
        return VERSION;
    }
}
