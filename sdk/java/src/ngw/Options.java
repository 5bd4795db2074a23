/**
 * The worker's own command line, as {@code bin/ngw-java} passes it after separating the JVM's
 * options: {@code --mode exact|shared|nails}, {@code --cp CLASSPATH}, {@code --main CLASS} or
 * {@code --jar JAR}, {@code --alias NAME=CLASS} (repeatable), {@code --kill-grace-ms N}, and
 * for exact mode {@code --jvm-opt OPTION} (repeatable, the program's JVM options), {@code
 * --spares N} and {@code --worker-cp PATHS} (the worker's own jars); after {@code --}, the
 * arguments every session's program gets before the client's.
 */
package ngw;

import java.io.File;
import java.io.IOException;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.jar.JarFile;

/** See the file comment. */
public final class Options {
    /** A bad command line. */
    public static final class UsageError extends Exception {
        private static final long serialVersionUID = 1L;

        UsageError(String message) {
            super(message);
        }
    }

    /** How sessions run. */
    public enum Mode {
        /** One JVM, Nailgun's semantics, for the main class. */
        SHARED,
        /** One JVM, Nailgun's semantics, classes by name and aliases. */
        NAILS,
        /** A JVM per session, exactly as {@code java} would run it. */
        EXACT
    }

    public final Mode mode;
    public final List<String> classpath;
    public final String mainClass;
    public final Map<String, String> aliases;
    public final List<String> leadingArgs;
    public final long killGraceMs;
    /** The jar of {@code -jar}, or null. */
    public final String jar;
    /** The program's JVM options (exact mode passes them to every JVM it starts). */
    public final List<String> jvmOptions;
    /** Spare JVMs kept ready in exact mode. */
    public final int spares;
    /** The worker's own jars, for a spare JVM's class path. */
    public final String workerClasspath;

    private Options(Mode mode, List<String> classpath, String mainClass, Map<String, String> aliases,
            List<String> leadingArgs, long killGraceMs, String jar, List<String> jvmOptions, int spares,
            String workerClasspath) {
        this.jar = jar;
        this.jvmOptions = jvmOptions;
        this.spares = spares;
        this.workerClasspath = workerClasspath;
        this.mode = mode;
        this.classpath = classpath;
        this.mainClass = mainClass;
        this.aliases = aliases;
        this.leadingArgs = leadingArgs;
        this.killGraceMs = killGraceMs;
    }

    /** Parses the worker's arguments. */
    public static Options parse(String[] argv) throws UsageError {
        Mode mode = Mode.SHARED;
        String cp = null;
        String main = null;
        String jar = null;
        Map<String, String> aliases = new LinkedHashMap<>();
        List<String> leading = new ArrayList<>();
        long grace = 2000;
        List<String> jvm = new ArrayList<>();
        int spares = 1;
        String workerCp = "";
        for (int i = 0; i < argv.length; i++) {
            String a = argv[i];
            if (a.equals("--")) {
                for (i++; i < argv.length; i++) {
                    leading.add(argv[i]);
                }
                break;
            }
            if (i + 1 >= argv.length) {
                throw new UsageError(a + " needs a value");
            }
            String v = argv[++i];
            switch (a) {
                case "--mode" -> mode = switch (v) {
                    case "shared" -> Mode.SHARED;
                    case "nails" -> Mode.NAILS;
                    case "exact" -> Mode.EXACT;
                    default -> throw new UsageError("unknown mode '" + v + "'");
                };
                case "--cp" -> cp = v;
                case "--jvm-opt" -> jvm.add(v);
                case "--worker-cp" -> workerCp = v;
                case "--spares" -> {
                    try {
                        spares = Integer.parseInt(v);
                    } catch (NumberFormatException e) {
                        throw new UsageError("--spares takes a number, not '" + v + "'");
                    }
                }
                case "--main" -> main = v;
                case "--jar" -> jar = v;
                case "--alias" -> {
                    int eq = v.indexOf('=');
                    if (eq <= 0 || eq == v.length() - 1) {
                        throw new UsageError("--alias takes NAME=CLASS, not '" + v + "'");
                    }
                    aliases.put(v.substring(0, eq), v.substring(eq + 1));
                }
                case "--kill-grace-ms" -> {
                    try {
                        grace = Long.parseLong(v);
                    } catch (NumberFormatException e) {
                        throw new UsageError("--kill-grace-ms takes a number, not '" + v + "'");
                    }
                }
                default -> throw new UsageError("unknown option '" + a + "'");
            }
        }
        List<String> classpath = new ArrayList<>();
        if (jar != null) {
            if (main != null) {
                throw new UsageError("give a main class or -jar, not both");
            }
            classpath.add(jar);
            try (JarFile j = new JarFile(jar)) {
                var mf = j.getManifest();
                main = mf == null ? null : mf.getMainAttributes().getValue("Main-Class");
                String extra = mf == null ? null : mf.getMainAttributes().getValue("Class-Path");
                if (extra != null) {
                    File base = new File(jar).getAbsoluteFile().getParentFile();
                    for (String e : extra.trim().split("\\s+")) {
                        if (!e.isEmpty()) {
                            classpath.add(new File(base, e).getPath());
                        }
                    }
                }
            } catch (IOException e) {
                throw new UsageError("cannot read jar " + jar + ": " + e.getMessage());
            }
            if (main == null) {
                throw new UsageError("no main manifest attribute, in " + jar);
            }
        } else if (cp != null) {
            for (String e : cp.split(File.pathSeparator)) {
                if (!e.isEmpty()) {
                    classpath.add(e);
                }
            }
        }
        if (mode != Mode.NAILS && main == null) {
            throw new UsageError("a main class, -jar JAR or --nails is needed");
        }
        return new Options(mode, List.copyOf(classpath), main, aliases, List.copyOf(leading), grace, jar,
                List.copyOf(jvm), spares, workerCp);
    }
}
