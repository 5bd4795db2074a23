/**
 * A spare JVM: started ahead of time by the exact-mode worker with the program's class path,
 * its main class loaded (not initialised) and the worker's platform layer ready, it waits on
 * fd 3 for one session, becomes that session's process, and runs {@code main} as {@code java}
 * would.
 *
 * <p>The worker sends the session only to a spare started in the client's working directory
 * with the same values of the environment variables a JVM reads at start-up (the locale,
 * {@code JAVA_TOOL_OPTIONS}, ...), so what the JVM fixed at start-up is what a cold run would
 * have fixed. The spare then sets the rest as a cold run has it: the client's environment
 * (before anything has read it: {@code System.getenv}'s snapshot is taken at its first use,
 * and is checked against the session's), umask, ignored signals and the client's own
 * descriptors as fds 0-2. It answers {@code R} and closes its channel, or {@code C} (run it
 * cold) and exits without having touched the session.
 *
 * <p>A spare started with {@code ngw.spare.ahead} was started with the full environment,
 * directory, umask, ignored signals and kinds of descriptors 0-2 of the session before it,
 * and initialises the main class before it says it is ready ({@link SpareInit}): {@code a}
 * when that was clean, else {@code x} (the program's initialisation cannot go ahead
 * exactly) or {@code g} (this system cannot guard it) with the reason, and it exits. The
 * worker hands it only a session that matches all of these.
 *
 * <p>A spare started with {@code ngw.spare.early} (and the worker's agent) answers {@code E}
 * instead of {@code R} when it will tell its exit status on the channel ({@link EarlyExit}).
 */
package ngw.exact;

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.lang.invoke.MethodHandle;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.MethodType;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import ngw.wire.Chunk;
import ngw.wire.ChunkReader;

/** See the file comment. */
public final class Spare {
    /** The channel's fd number in a spare. */
    static final int FD = 3;

    private Spare() {}

    /** The request a spare reads: the session, and the descriptors for its fds 0-2. */
    record Request(List<String> args, Map<String, String> env, int umask, List<String> ignored, int[] stdio,
            int ctty) {}

    /** The job's anchor ({@code ngw.spare.anchor}), or null. */
    private static String anchor;

    public static void main(String[] argv) throws Throwable {
        String mainClass = System.getProperty("ngw.spare.main");
        String classpath = System.getProperty("ngw.spare.cp");
        String command = System.getProperty("ngw.spare.command");
        anchor = System.getProperty("ngw.spare.anchor");
        boolean ahead = System.getProperty("ngw.spare.ahead") != null;
        boolean early = System.getProperty("ngw.spare.early") != null && EarlyExit.arm();
        String umask = System.getProperty("ngw.spare.umask");
        String ignored = System.getProperty("ngw.spare.ignored");
        Class<?> c = Class.forName(mainClass, false, ClassLoader.getSystemClassLoader());
        MethodHandle main = MethodHandles.publicLookup().findStatic(c, "main",
                MethodType.methodType(void.class, String[].class));
        rehearse();
        // The properties as a cold JVM has them before the program runs (JNA has read its
        // own).
        for (String p : List.of("jna.encoding", "ngw.spare.main", "ngw.spare.cp", "ngw.spare.command",
                "ngw.spare.anchor", "ngw.spare.ahead", "ngw.spare.umask", "ngw.spare.ignored", "ngw.spare.early")) {
            System.clearProperty(p);
        }
        System.setProperty("java.class.path", classpath);
        System.setProperty("sun.java.command", command);
        if (ahead) {
            if (umask != null) {
                Posix.umask(Integer.parseInt(umask, 8));
            }
            if (ignored != null && !ignored.isEmpty()) {
                for (String s : ignored.split(",")) {
                    int n = Signals.number(s);
                    if (n > 0) {
                        Posix.ignore(n);
                    }
                }
            }
            SpareInit.Outcome o = SpareInit.run(c);
            if (!o.clean()) {
                Posix.writeAll(FD, ((o.program() ? "x" : "g") + o.why()).getBytes(StandardCharsets.UTF_8));
                Runtime.getRuntime().halt(0);
                return;
            }
            Posix.writeAll(FD, new byte[] {'a'});
        } else {
            Posix.writeAll(FD, new byte[] {'r'});
        }
        Request r = read(FD);
        if (r == null) {
            Runtime.getRuntime().halt(0);
            return;
        }
        String why = apply(r);
        if (why != null) {
            Posix.writeAll(FD, ("C" + why).getBytes(StandardCharsets.UTF_8));
            Runtime.getRuntime().halt(0);
            return;
        }
        // With its exit status told early, the channel stays, out of the program's way; a
        // session on a terminal is told by waitpid (the terminal's hang-up at the end of a
        // session leader belongs to its process's end).
        Posix.writeAll(FD, new byte[] {(byte) (early && r.ctty() < 0 ? 'E' : 'R')});
        if (early && r.ctty() < 0) {
            EarlyExit.keep(FD, r.stdio());
        } else {
            Posix.closeQuietly(FD);
        }
        String[] args = r.args().stream().map(Posix::decoded).toArray(String[]::new);
        System.setProperty("sun.java.command", args.length == 0 ? command : command + " " + String.join(" ", args));
        try {
            main.invokeExact(args);
        } catch (Throwable t) {
            ngw.Traces.trim(t, mainClass, "main");
            EarlyExit.mainEnded(true);
            throw t;
        }
        EarlyExit.mainEnded(false);
    }

    /**
     * Runs, on nothing that matters, the code a session will run first: this spare's own
     * hand-over (a request parsed, strings decoded, the platform calls) and what nearly every
     * program does first (printing, string concatenation, formatting). A spare is otherwise
     * a JVM that has run nothing, and the first run of each path costs milliseconds in the
     * interpreter, class loading and {@code invokedynamic} bootstraps. No state the program
     * can see changes: the output goes nowhere, the umask is set back.
     */
    private static void rehearse() throws IOException {
        java.io.ByteArrayOutputStream req = new java.io.ByteArrayOutputStream();
        for (String[] c : new String[][] {{"M", "0,1,2"}, {"A", "x"}, {"E", "A=b"}, {"U", "22"}, {"I", "SIGHUP"},
                {"C", ""}}) {
            byte[] b = c[1].getBytes(StandardCharsets.ISO_8859_1);
            req.write(b.length >>> 24);
            req.write(b.length >>> 16);
            req.write(b.length >>> 8);
            req.write(b.length);
            req.write(c[0].charAt(0));
            req.write(b, 0, b.length);
        }
        Request r = parse(req.toByteArray(), new int[0]);
        Map<String, String> m = new LinkedHashMap<>();
        if (r != null) {
            r.env().forEach((k, v) -> m.put(Posix.decoded(k), Posix.decoded(v)));
            r.args().stream().map(Posix::decoded).toArray(String[]::new);
        }
        int old = Posix.umask(0);
        Posix.umask(old);
        java.io.PrintStream p = new java.io.PrintStream(java.io.OutputStream.nullOutputStream(), true,
                java.nio.charset.Charset.defaultCharset());
        int n = m.size();
        long l = n + 1L;
        String s = String.valueOf(l);
        p.println("run " + n);
        p.println(s + " " + l + " " + n + " " + s);
        p.println(s + n);
        p.print(n);
        p.print(1.5);
        p.printf("%s %d%n", s, n);
        p.println(String.format("%5.2f", 1.5));
        p.println(String.join(" ", s, s));
        p.flush();
        StringBuilder b = new StringBuilder().append(s).append(n).append(l);
        p.println(b);
        System.setProperty("ngw.spare.rehearsal", s);
        System.clearProperty("ngw.spare.rehearsal");
    }

    /** Sets the session's state; the reason the session must run cold, or null. */
    private static String apply(Request r) {
        Posix.clearenv();
        for (Map.Entry<String, String> e : r.env().entrySet()) {
            try {
                Posix.setenv(e.getKey(), e.getValue(), 1);
            } catch (com.sun.jna.LastErrorException ex) {
                return "cannot set " + e.getKey();
            }
        }
        Map<String, String> expected = new LinkedHashMap<>();
        r.env().forEach((k, v) -> expected.put(Posix.decoded(k), Posix.decoded(v)));
        if (!System.getenv().equals(expected)) {
            return "the JVM read its environment before the session";
        }
        if (r.umask() >= 0) {
            Posix.umask(r.umask());
        }
        for (String s : r.ignored()) {
            int n = Signals.number(s);
            if (n > 0) {
                Posix.ignore(n);
            }
        }
        if (r.ctty() >= 0) {
            // A spare is a session leader with no terminal: the slave becomes its own.
            try {
                Posix.controllingTerminal(r.ctty());
            } catch (IOException e) {
                return e.getMessage();
            }
            Posix.closeQuietly(r.ctty());
            // Its group would be orphaned (its parent is in another session), and the
            // terminal's ^Z discarded for it: the anchor gives it a member with a parent in
            // the session. Without one, ^Z stops what the program starts, not the JVM.
            if (anchor != null && !Posix.anchor(anchor)) {
                System.err.println("ngw: the job's anchor " + anchor + " failed: ^Z stops what the program starts, not the JVM");
            }
        }
        for (int i = 0; i < 3; i++) {
            if (r.stdio()[i] >= 0) {
                Posix.dup2(r.stdio()[i], i);
            } else {
                Posix.closeQuietly(i);
            }
        }
        for (int f : r.stdio()) {
            if (f > 2) {
                Posix.closeQuietly(f);
            }
        }
        return null;
    }

    /** Reads one request; null if the worker closed the channel. */
    static Request read(int fd) throws IOException {
        java.io.ByteArrayOutputStream bytes = new java.io.ByteArrayOutputStream();
        byte[] buf = new byte[64 * 1024];
        int[] fds = new int[0];
        while (true) {
            Posix.Received got = Posix.recv(fd, buf);
            if (got.length() == 0) {
                for (int f : fds) {
                    Posix.closeQuietly(f);
                }
                return null;
            }
            if (got.fds().length > 0) {
                int[] all = new int[fds.length + got.fds().length];
                System.arraycopy(fds, 0, all, 0, fds.length);
                System.arraycopy(got.fds(), 0, all, fds.length, got.fds().length);
                fds = all;
            }
            bytes.write(buf, 0, got.length());
            Request r = parse(bytes.toByteArray(), fds);
            if (r != null) {
                return r;
            }
        }
    }

    private static Request parse(byte[] data, int[] fds) throws IOException {
        ChunkReader in = new ChunkReader(new ByteArrayInputStream(data), Integer.MAX_VALUE);
        List<String> args = new ArrayList<>();
        Map<String, String> env = new LinkedHashMap<>();
        List<String> ignored = new ArrayList<>();
        int umask = -1;
        int[] stdio = {-1, -1, -1};
        int mapped = 0;
        boolean terminal = false;
        Chunk c;
        try {
            while ((c = in.read()) != null) {
                String text = new String(c.payload(), StandardCharsets.ISO_8859_1);
                switch (c.type()) {
                    case 'A' -> args.add(text);
                    case 'E' -> {
                        int eq = text.indexOf('=');
                        if (eq > 0) {
                            env.put(text.substring(0, eq), text.substring(eq + 1));
                        }
                    }
                    case 'U' -> umask = Integer.parseInt(text, 8);
                    case 'I' -> ignored.add(text);
                    case 'M' -> {
                        String[] map = text.isEmpty() ? new String[0] : text.split(",");
                        for (int i = 0; i < map.length && i < fds.length; i++) {
                            int target = Integer.parseInt(map[i]);
                            if (target >= 0 && target < 3) {
                                stdio[target] = fds[i];
                            }
                        }
                        mapped = map.length;
                    }
                    case 'T' -> terminal = true;
                    case 'C' -> {
                        int ctty = terminal && mapped < fds.length ? fds[mapped] : -1;
                        return new Request(args, env, umask, ignored, stdio, ctty);
                    }
                    default -> { }
                }
            }
        } catch (java.io.EOFException e) {
            return null;
        }
        return null;
    }
}
