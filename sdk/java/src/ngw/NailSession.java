/**
 * What a running session offers the Nailgun API classes ({@code NGContext} of both API
 * generations): its arguments, the client's environment and directory, its streams, its
 * exit, and the client's connection with its listeners.
 */
package ngw;

import java.io.InputStream;
import java.io.PrintStream;
import java.util.Properties;

/** One session, as the Nailgun APIs see it. */
public interface NailSession {
    /** The arguments after the command. */
    String[] args();

    /** The command the client ran (after alias resolution). */
    String command();

    /** The client's environment. */
    Properties env();

    /** The client's working directory, or null if it sent none. */
    String workingDirectory();

    /** The session's stdin. */
    InputStream in();

    /** The session's stdout. */
    PrintStream out();

    /** The session's stderr. */
    PrintStream err();

    /** Ends the session with {@code code}; the first exit wins and later output is dropped. */
    void exit(int code);

    /** False once the client has gone. */
    boolean isClientConnected();

    /**
     * Calls {@code onDisconnect} when the client goes (at once if it has gone already); the
     * returned handle removes it.
     */
    Runnable onDisconnect(Object key, Runnable onDisconnect);

    /** Removes a listener added with {@link #onDisconnect}. */
    void removeDisconnect(Object key);

    /** Removes every disconnect listener. */
    void removeAllDisconnects();

    /** Calls {@code beat} about once a second while the client is connected. */
    void onHeartbeat(Object key, Runnable beat);

    /** Removes a heartbeat listener. */
    void removeHeartbeat(Object key);

    /** The worker, for {@code getNGServer()}. */
    WorkerView worker();

    /** What a nail may ask of the worker through {@code NGServer}. */
    interface WorkerView {
        /** Aliases: name to class name, in name order. */
        java.util.SortedMap<String, String> aliases();

        /** Adds an alias for this worker's life. */
        void addAlias(String name, String className);

        /** Removes an alias. */
        void removeAlias(String name);

        /** Whether classes can be run by name. */
        boolean nailsByClassName();

        /** Runs and running counts per nail class. */
        java.util.Map<String, long[]> stats();

        /** Stops taking sessions and exits once the running ones end. */
        void retire(String reason);

        /** The worker's own streams (its log). */
        PrintStream out();

        PrintStream err();

        InputStream in();
    }
}
