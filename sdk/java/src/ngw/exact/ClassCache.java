/**
 * Class data sharing for the exact mode's program, made automatically: a static CDS archive
 * of the classes the program's own first session loaded, which every later JVM of that
 * program (spares and cold-way sessions) maps instead of loading, parsing and verifying those
 * classes again. On JDK 24 and later it is an AOT cache ({@code -XX:+AOTClassLinking}: the
 * classes loaded and linked), used with {@code -XX:AOTCache}; on JDK 17 to 23 a static AppCDS
 * archive, used with {@code -XX:SharedArchiveFile}.
 *
 * <p>How it is made never delays a session. A session with no cache for its key records the
 * names of the classes it loads ({@code -XX:DumpLoadedClassList}, written as they load: no
 * work at exit); once that session has ended and its exit code has gone to the client, a
 * separate JVM ({@code -Xshare:dump}, which loads and links the listed classes and runs
 * nothing of the program) writes the archive in the background. A training run of JDK 25's
 * own ({@code -XX:AOTMode=record}, which also keeps method profiles) writes its recording
 * when the session's JVM exits, seconds after the program is done, so it is not used.
 *
 * <p>The cache is kept in {@code $NGW_STATE_DIR/jvm-cache} (ngd sets it), named by a key: a
 * SHA-256 of the JDK (its {@code java}, {@code release} file and {@code libjvm.so}), the class
 * path's entries and the contents of its jars, and the JVM options. A changed jar is a new key,
 * so a new cache is recorded and made; the JVM also refuses an archive whose jars changed
 * after it was written (their size and time). An archive is written under a temporary name
 * and renamed; the oldest-used archives are deleted while the directory holds more than the
 * bound ({@code NGW_JAVA_CACHE_MB}, default 1024; 0 turns the cache off).
 *
 * <p>What the JVM prints about the archive (a warning when it cannot use one) goes to a log
 * file of the session's own, never to the session: it is read when the JVM has exited and
 * says whether the JVM mapped the cache, which the worker counts ({@code cache-used}, {@code
 * cache-unused}: the {@code count} notice, docs/ngw.md 15.3). A class path with a directory
 * holding files gets no cache: the JDK archives classes from jars only.
 */
package ngw.exact;

import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.attribute.FileTime;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.atomic.AtomicLong;
import java.util.stream.Stream;

/** See the file comment. */
final class ClassCache {
    /** Changes when the way archives are made changes, so that old ones are not used. */
    private static final String FORMAT = "ngw-jvm-cache 1";
    /** Options that take class data sharing into the user's own hands: no cache then. */
    private static final List<String> USER_CDS = List.of("-Xshare", "-XX:SharedArchiveFile", "-XX:AOT",
            "-XX:ArchiveClassesAtExit", "-XX:DumpLoadedClassList", "-XX:SharedClassListFile",
            "-XX:+AutoCreateSharedArchive");

    /**
     * What one JVM was started with: its log, and the class list it records (or null). The
     * worker reads the log when the JVM has exited ({@link #finished}).
     */
    static final class Use {
        final Path log;
        final Path recording;
        final String key;
        final Path archive;
        /** Whether the JVM was given the archive (else the JDK's own default one). */
        final boolean given;

        Use(Path log, Path recording, String key, Path archive, boolean given) {
            this.log = log;
            this.recording = recording;
            this.key = key;
            this.archive = archive;
            this.given = given;
        }
    }

    /** One jar's content hash, with the size and time it was taken at. */
    private record Hashed(long size, long mtime, byte[] sha) {}

    private final ExactWorker worker;
    private final ngw.Options options;
    private final String java;
    private final int feature;
    private final Path dir;
    private final long bound;
    /** Why there is no cache for this program, or null. */
    private final String off;
    private final Map<String, Hashed> hashes = new HashMap<>();
    /** Keys whose archive is being made now. */
    private final Set<String> busy = new HashSet<>();
    private final AtomicLong serial = new AtomicLong();

    ClassCache(ExactWorker worker, ngw.Options options, String java) {
        this.worker = worker;
        this.options = options;
        this.java = java;
        this.feature = Runtime.version().feature();
        this.dir = stateDir().resolve("jvm-cache");
        this.bound = bound();
        this.off = why();
        if (off != null) {
            worker.log("no class-data cache: " + off);
        }
    }

    /** Where the worker keeps what it makes for later workers ({@code $NGW_STATE_DIR}). */
    static Path stateDir() {
        String d = System.getenv("NGW_STATE_DIR");
        if (d != null && d.startsWith("/")) {
            return Path.of(d);
        }
        String xdg = System.getenv("XDG_STATE_HOME");
        if (xdg != null && xdg.startsWith("/")) {
            return Path.of(xdg, "ngw");
        }
        return Path.of(System.getProperty("user.home"), ".local", "state", "ngw");
    }

    private static long bound() {
        String v = System.getenv("NGW_JAVA_CACHE_MB");
        try {
            return v == null || v.isEmpty() ? 1024L << 20 : Long.parseLong(v.trim()) << 20;
        } catch (NumberFormatException e) {
            return 1024L << 20;
        }
    }

    private String why() {
        if (bound <= 0) {
            return "NGW_JAVA_CACHE_MB is 0";
        }
        for (String o : options.jvmOptions) {
            for (String p : USER_CDS) {
                if (o.startsWith(p)) {
                    return "the JVM options set class data sharing (" + o + ")";
                }
            }
        }
        for (String e : options.classpath) {
            File f = new File(e);
            String[] files = f.isDirectory() ? f.list() : null;
            if (files != null && files.length > 0) {
                return "the class path has a directory (" + e + "): the JDK archives classes from jars only";
            }
        }
        try {
            Files.createDirectories(dir.resolve("logs"));
        } catch (IOException e) {
            return "cannot create " + dir + ": " + e.getMessage();
        }
        return null;
    }

    /**
     * The options a JVM of the program starts with, before the user's own (theirs win), and
     * what to do when it has exited; null when there is no cache for this program.
     */
    synchronized Use start(List<String> argv) {
        if (off != null) {
            return null;
        }
        try {
            Files.createDirectories(dir.resolve("logs"));
        } catch (IOException e) {
            worker.log("no class-data cache for this session: " + e.getMessage());
            return null;
        }
        String key;
        try {
            key = key();
        } catch (IOException e) {
            worker.log("no class-data cache for this session: " + e.getMessage());
            return null;
        }
        Path archive = dir.resolve(key + ".jsa");
        Path log = dir.resolve("logs").resolve(key + "-" + ProcessHandle.current().pid() + "-"
                + serial.incrementAndGet() + ".log");
        Path recording = null;
        boolean given = false;
        // What the JVM says about the archive goes to this JVM's log, never to its stdout.
        argv.add("-Xlog:cds*=off");
        if (feature >= 24) {
            argv.add("-Xlog:aot*=off");
        }
        argv.add("-Xlog:" + (feature >= 24 ? "cds=info,aot=info" : "cds=info") + ":file=" + log + "::filecount=0");
        if (Files.isRegularFile(archive)) {
            given = true;
            argv.add((feature >= 24 ? "-XX:AOTCache=" : "-XX:SharedArchiveFile=") + archive);
            try {
                Files.setLastModifiedTime(archive, FileTime.fromMillis(System.currentTimeMillis()));
            } catch (IOException e) {
                // Only the order of eviction.
            }
        } else if (!Files.exists(dir.resolve(key + ".failed"))) {
            // Every JVM records until the archive is there (a spare may never get a
            // session); the first to end with a session makes it.
            recording = dir.resolve(key + ".classlist." + serial.incrementAndGet());
            argv.add("-XX:DumpLoadedClassList=" + recording);
        }
        return new Use(log, recording, key, archive, given);
    }

    /**
     * The JVM has exited: whether it used the cache (counted), and, when it recorded its
     * classes, the archive made from them in the background.
     */
    void finished(Use u, long session) {
        if (u == null) {
            return;
        }
        String text;
        try {
            text = Files.readString(u.log, StandardCharsets.ISO_8859_1);
        } catch (IOException e) {
            text = "";
        }
        deleteQuietly(u.log);
        // The JVM names the archive it opens, then maps it or says why not.
        boolean used = u.given && text.contains(u.archive.toString()) && text.contains("Mapped static")
                && !text.contains("Unable to map") && !text.contains("[error");
        worker.notice("count", used ? "cache-used" : "cache-unused", session);
    }

    /** Makes the archive from what the JVM recorded; returns at once. */
    void make(Use u) {
        if (u == null || u.recording == null) {
            return;
        }
        synchronized (this) {
            if (busy.contains(u.key) || Files.exists(u.archive)) {
                deleteQuietly(u.recording);
                return;
            }
            busy.add(u.key);
        }
        Thread t = new Thread(() -> {
            try {
                dump(u);
            } finally {
                synchronized (this) {
                    busy.remove(u.key);
                }
                deleteQuietly(u.recording);
            }
        }, "ngw-cache-" + u.key.substring(0, 8));
        t.setDaemon(true);
        t.start();
    }

    /** A JVM started with {@code u} went without a session: nothing was recorded for it. */
    void abandoned(Use u) {
        if (u == null) {
            return;
        }
        deleteQuietly(u.log);
        if (u.recording != null) {
            deleteQuietly(u.recording);
        }
    }

    private void dump(Use u) {
        if (!Files.isRegularFile(u.recording)) {
            worker.log("no class list was recorded at " + u.recording);
            return;
        }
        Path tmp = dir.resolve(u.key + ".jsa.tmp." + serial.incrementAndGet());
        Path out = dir.resolve("logs").resolve(u.key + ".dump.log");
        List<String> argv = new ArrayList<>();
        argv.add(java);
        argv.addAll(options.jvmOptions);
        argv.add("-Xshare:dump");
        argv.add("-XX:SharedClassListFile=" + u.recording);
        argv.add("-XX:SharedArchiveFile=" + tmp);
        if (feature >= 24) {
            argv.add("-XX:+AOTClassLinking");
        }
        argv.add("-cp");
        argv.add(String.join(":", options.classpath));
        int code;
        try {
            Process p = new ProcessBuilder(argv).directory(dir.toFile()).redirectErrorStream(true)
                    .redirectOutput(out.toFile()).redirectInput(ProcessBuilder.Redirect.from(new File("/dev/null")))
                    .start();
            code = p.waitFor();
        } catch (IOException e) {
            worker.log("cannot make the class-data cache: " + e.getMessage());
            deleteQuietly(tmp);
            return;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            deleteQuietly(tmp);
            return;
        }
        if (code != 0 || !Files.isRegularFile(tmp)) {
            worker.log("the class-data cache " + u.key + " could not be made (exit " + code + "; see " + out + ")");
            deleteQuietly(tmp);
            try {
                Files.writeString(dir.resolve(u.key + ".failed"), "exit " + code + "\n");
            } catch (IOException e) {
                // It is tried again by the next session.
            }
            worker.notice("count", "cache-failed", -1);
            return;
        }
        try {
            Files.move(tmp, u.archive, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
        } catch (IOException e) {
            worker.log("cannot keep the class-data cache: " + e.getMessage());
            deleteQuietly(tmp);
            return;
        }
        deleteQuietly(out);
        worker.log("made the class-data cache " + u.archive);
        worker.notice("count", "cache-made", -1);
        prune();
    }

    /**
     * Deletes the least recently used archives while the directory holds more than the
     * bound, and logs and recordings a day old (left by JVMs whose worker died).
     */
    private void prune() {
        long day = System.currentTimeMillis() - 24 * 3600 * 1000L;
        for (Path d : List.of(dir, dir.resolve("logs"))) {
            try (Stream<Path> s = Files.list(d)) {
                s.filter(p -> {
                    String n = p.getFileName().toString();
                    boolean ours = n.endsWith(".log") || n.contains(".classlist.") || n.contains(".jsa.tmp.");
                    return ours && mtime(p) < day;
                }).forEach(ClassCache::deleteQuietly);
            } catch (IOException e) {
                // Tried again after the next archive.
            }
        }
        List<Path> archives;
        try (Stream<Path> s = Files.list(dir)) {
            archives = new ArrayList<>(s.filter(p -> p.getFileName().toString().endsWith(".jsa")).toList());
        } catch (IOException e) {
            return;
        }
        archives.sort((a, b) -> Long.compare(mtime(a), mtime(b)));
        long total = 0;
        for (Path p : archives) {
            total += size(p);
        }
        for (Path p : archives) {
            if (total <= bound) {
                break;
            }
            total -= size(p);
            deleteQuietly(p);
            worker.log("dropped the class-data cache " + p + " (over " + (bound >> 20) + " MiB)");
        }
    }

    /**
     * The program's key as it is on disk now: the cache's, with the main class and the file
     * it is loaded from when that is in a directory (a jar is in the cache's key already).
     */
    synchronized String programKey(String mainClass) throws IOException {
        MessageDigest d = sha256();
        update(d, key());
        update(d, String.valueOf(mainClass));
        if (mainClass != null) {
            String file = mainClass.replace('.', '/') + ".class";
            for (String e : options.classpath) {
                Path p = Path.of(e, file);
                if (Files.isRegularFile(p)) {
                    update(d, p + " " + Files.size(p) + " " + Files.getLastModifiedTime(p).toMillis());
                    break;
                }
            }
        }
        StringBuilder hex = new StringBuilder();
        for (byte b : d.digest()) {
            hex.append(String.format("%02x", b));
        }
        return hex.substring(0, 32);
    }

    /** The cache's key for the program as it is on disk now. */
    private String key() throws IOException {
        MessageDigest d = sha256();
        update(d, FORMAT);
        Path real = Path.of(java).toRealPath();
        update(d, real.toString());
        Path home = real.getParent().getParent();
        for (Path p : List.of(real, home.resolve("release"), home.resolve("lib/server/libjvm.so"))) {
            if (Files.isRegularFile(p)) {
                update(d, p + " " + Files.size(p) + " " + Files.getLastModifiedTime(p).toMillis());
            }
        }
        if (Files.isRegularFile(home.resolve("release"))) {
            d.update(Files.readAllBytes(home.resolve("release")));
        }
        update(d, "cp");
        for (String e : options.classpath) {
            update(d, e);
            Path p = Path.of(e);
            if (Files.isRegularFile(p)) {
                d.update(jar(p));
            }
        }
        update(d, "opts");
        for (String o : options.jvmOptions) {
            update(d, o);
        }
        StringBuilder hex = new StringBuilder();
        for (byte b : d.digest()) {
            hex.append(String.format("%02x", b));
        }
        return hex.substring(0, 32);
    }

    /** A jar's content hash, taken again only when its size or time changed. */
    private byte[] jar(Path p) throws IOException {
        long size = Files.size(p);
        long mtime = Files.getLastModifiedTime(p).toMillis();
        Hashed h = hashes.get(p.toString());
        if (h != null && h.size() == size && h.mtime() == mtime) {
            return h.sha();
        }
        MessageDigest d = sha256();
        byte[] buf = new byte[64 * 1024];
        try (InputStream in = Files.newInputStream(p)) {
            int n;
            while ((n = in.read(buf)) > 0) {
                d.update(buf, 0, n);
            }
        }
        h = new Hashed(size, mtime, d.digest());
        hashes.put(p.toString(), h);
        return h.sha();
    }

    private static MessageDigest sha256() {
        try {
            return MessageDigest.getInstance("SHA-256");
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }

    private static void update(MessageDigest d, String s) {
        d.update(s.getBytes(StandardCharsets.UTF_8));
        d.update((byte) 0);
    }

    private static long mtime(Path p) {
        try {
            return Files.getLastModifiedTime(p).toMillis();
        } catch (IOException e) {
            return 0;
        }
    }

    private static long size(Path p) {
        try {
            return Files.size(p);
        } catch (IOException e) {
            return 0;
        }
    }

    private static void deleteQuietly(Path p) {
        try {
            Files.deleteIfExists(p);
        } catch (IOException e) {
            // Left for the next prune.
        }
    }
}
