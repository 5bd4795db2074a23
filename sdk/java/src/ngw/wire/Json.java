/**
 * The little JSON the worker writes (its hello and notices): objects of strings, numbers,
 * booleans and string arrays. The worker never parses JSON.
 */
package ngw.wire;

import java.util.List;
import java.util.Map;

/** Writes JSON values. */
public final class Json {
    private Json() {}

    /** {@code map} as a JSON object; values are String, Number, Boolean or List of String. */
    public static String object(Map<String, ?> map) {
        StringBuilder b = new StringBuilder("{");
        for (Map.Entry<String, ?> e : map.entrySet()) {
            if (b.length() > 1) {
                b.append(',');
            }
            string(b, e.getKey());
            b.append(':');
            value(b, e.getValue());
        }
        return b.append('}').toString();
    }

    private static void value(StringBuilder b, Object v) {
        if (v instanceof String s) {
            string(b, s);
        } else if (v instanceof Number || v instanceof Boolean) {
            b.append(v);
        } else if (v instanceof List<?> list) {
            b.append('[');
            for (int i = 0; i < list.size(); i++) {
                if (i > 0) {
                    b.append(',');
                }
                value(b, list.get(i));
            }
            b.append(']');
        } else {
            b.append("null");
        }
    }

    private static void string(StringBuilder b, String s) {
        b.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"' -> b.append("\\\"");
                case '\\' -> b.append("\\\\");
                case '\n' -> b.append("\\n");
                case '\r' -> b.append("\\r");
                case '\t' -> b.append("\\t");
                default -> {
                    if (c < 0x20) {
                        b.append(String.format("\\u%04x", (int) c));
                    } else {
                        b.append(c);
                    }
                }
            }
        }
        b.append('"');
    }
}
