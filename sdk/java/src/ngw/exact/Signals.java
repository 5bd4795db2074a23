/**
 * Signal names and numbers (Linux), as the worker protocol names them ({@code SIGINT},
 * ...): for forwarding {@code i} interrupts and reporting deaths and stops.
 */
package ngw.exact;

import java.util.Map;
import java.util.TreeMap;

/** See the file comment. */
final class Signals {
    private static final String[] NAMES = {
        null, "SIGHUP", "SIGINT", "SIGQUIT", "SIGILL", "SIGTRAP", "SIGABRT", "SIGBUS", "SIGFPE",
        "SIGKILL", "SIGUSR1", "SIGSEGV", "SIGUSR2", "SIGPIPE", "SIGALRM", "SIGTERM", "SIGSTKFLT",
        "SIGCHLD", "SIGCONT", "SIGSTOP", "SIGTSTP", "SIGTTIN", "SIGTTOU", "SIGURG", "SIGXCPU",
        "SIGXFSZ", "SIGVTALRM", "SIGPROF", "SIGWINCH", "SIGIO", "SIGPWR", "SIGSYS",
    };
    private static final Map<String, Integer> NUMBERS = new TreeMap<>();

    static {
        for (int i = 1; i < NAMES.length; i++) {
            NUMBERS.put(NAMES[i], i);
        }
    }

    private Signals() {}

    /** The number of {@code name}, or -1. */
    static int number(String name) {
        return NUMBERS.getOrDefault(name, -1);
    }

    /** The name of signal {@code n}, or {@code SIG<n>}. */
    static String name(int n) {
        return n > 0 && n < NAMES.length ? NAMES[n] : "SIG" + n;
    }

    /** True for the signals that stop a process. */
    static boolean isStop(String name) {
        return name.equals("SIGTSTP") || name.equals("SIGTTIN") || name.equals("SIGTTOU") || name.equals("SIGSTOP");
    }
}
