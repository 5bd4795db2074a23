/**
 * Timestamps of one session's way through the shared JVM, for finding where its time goes:
 * on only with {@code NGW_JAVA_PROBE=1} in the worker's environment (the plugin's {@code
 * env}), when each session ends with one line in the worker's log: the microseconds from the
 * first chunk of its header to the {@code C} that ends it, the making of its session object
 * and streams, the check of the class path's jars, from there to its program starting on its
 * thread, the program's run, and the writing of its {@code X}; then the first and last of
 * those times ({@code System.nanoTime}: the clock {@code CLOCK_MONOTONIC} on Linux), to set
 * beside the client's and ngd's.
 */
package ngw.shared;

/** See the file comment. */
final class Probe {
    /** Whether sessions are timed. */
    static final boolean ON = "1".equals(System.getenv("NGW_JAVA_PROBE"));

    /** The points a session passes, in order. */
    enum Mark { HEADER, COMMAND, MADE, CHECKED, RUN, RETURNED, EXITED }

    private final long[] at = new long[Mark.values().length];

    /** A session's probe, or null when probes are off. */
    static Probe start(long headerAt) {
        if (!ON) {
            return null;
        }
        Probe p = new Probe();
        p.at[Mark.HEADER.ordinal()] = headerAt;
        return p;
    }

    void mark(Mark m) {
        at[m.ordinal()] = System.nanoTime();
    }

    /** The log line for session {@code id}. */
    String line(long id) {
        StringBuilder b = new StringBuilder("ngw-java: probe: session ").append(id);
        Mark[] marks = Mark.values();
        for (int i = 1; i < marks.length; i++) {
            long us = at[i] == 0 || at[i - 1] == 0 ? -1 : (at[i] - at[i - 1]) / 1000;
            b.append(' ').append(marks[i - 1].name().toLowerCase()).append('-').append(marks[i].name().toLowerCase())
                    .append(' ').append(us).append("us");
        }
        return b.append(" from ").append(at[0]).append(" to ").append(at[marks.length - 1]).append(" ns").toString();
    }
}
