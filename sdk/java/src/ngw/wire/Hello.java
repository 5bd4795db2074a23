/**
 * The JVM worker's hello (docs/ngw.md §5): its protocol, pid, SDK and runtime, and either what
 * it serves or why it cannot start.
 */
package ngw.wire;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/** See the file comment. */
public final class Hello {
    private Hello() {}

    /** A refusal: {@code error} is the reason ngd shows. */
    public static void refuse(ChunkWriter writer, String error) throws IOException {
        Map<String, Object> h = common();
        h.put("error", error);
        send(writer, h);
    }

    /** Ready to serve {@code commands} with {@code features}; {@code extra} fields last. */
    public static void ready(ChunkWriter writer, List<String> commands, List<String> features, int maxSessions,
            int maxChunk, long killGraceMs, Map<String, Object> extra) throws IOException {
        Map<String, Object> h = common();
        h.put("commands", commands);
        h.put("features", features);
        h.put("max_sessions", maxSessions);
        h.put("max_chunk", maxChunk);
        h.put("kill_grace_ms", killGraceMs);
        h.putAll(extra);
        send(writer, h);
    }

    private static Map<String, Object> common() {
        Map<String, Object> h = new LinkedHashMap<>();
        h.put("protocol", 1);
        h.put("pid", ProcessHandle.current().pid());
        h.put("sdk", "ngw-java/0.1.0");
        h.put("runtime", System.getProperty("java.vm.name") + " " + System.getProperty("java.version"));
        return h;
    }

    private static void send(ChunkWriter writer, Map<String, Object> h) throws IOException {
        writer.control(Chunk.HELLO, Json.object(h).getBytes(StandardCharsets.UTF_8));
    }
}
