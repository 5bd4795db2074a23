/**
 * The JVM worker's platform layer: the POSIX calls Java lacks (descriptor passing, spawning
 * with file actions, waiting for stops, process groups, the environment, a thread's seccomp
 * filter), through JNA's
 * direct mapping of the C library, each with its contract. Linux, 64-bit (LP64) layouts.
 *
 * <p>Strings cross to C as ISO-8859-1 ({@code jna.encoding}), so a string holding the raw
 * bytes of an argument, environment entry or path (see {@link #raw}) reaches C byte for
 * byte, whatever the JVM's own encoding: the worker passes the client's bytes on unchanged.
 */
package ngw.exact;

import com.sun.jna.LastErrorException;
import com.sun.jna.Memory;
import com.sun.jna.Native;
import com.sun.jna.NativeLibrary;
import com.sun.jna.Pointer;
import com.sun.jna.StringArray;

import java.io.IOException;
import java.util.List;

/** See the file comment. */
final class Posix {
    static {
        System.setProperty("jna.encoding", "ISO-8859-1");
        Native.register(NativeLibrary.getInstance("c"));
    }

    /** The file-name encoding of this JVM ({@code sun.jnu.encoding}): argv, env and paths. */
    static final java.nio.charset.Charset JNU =
            java.nio.charset.Charset.forName(System.getProperty("sun.jnu.encoding", "UTF-8"));

    /** {@code s} as the string of its bytes in this JVM's file-name encoding, one char a byte. */
    static String raw(String s) {
        return new String(s.getBytes(JNU), java.nio.charset.StandardCharsets.ISO_8859_1);
    }

    /** A string of bytes ({@link #raw}) decoded as this JVM decodes argv and env. */
    static String decoded(String raw) {
        return new String(raw.getBytes(java.nio.charset.StandardCharsets.ISO_8859_1), JNU);
    }

    private Posix() {}

    static final int EINTR = 4;
    static final int EAGAIN = 11;
    static final int AF_UNIX = 1;
    static final int SOCK_STREAM = 1;
    static final int SOCK_CLOEXEC = 0x80000;
    static final int SOL_SOCKET = 1;
    static final int SCM_RIGHTS = 1;
    static final int MSG_CMSG_CLOEXEC = 0x40000000;
    static final int WUNTRACED = 2;
    static final int O_RDONLY = 0;
    static final int O_CLOEXEC = 0x80000;
    static final int POSIX_SPAWN_SETSIGDEF = 0x04;
    static final int POSIX_SPAWN_SETSIGMASK = 0x08;
    static final int POSIX_SPAWN_SETSID = 0x80;
    static final int SIGHUP = 1;
    static final int SIGKILL = 9;
    static final int SIGWINCH = 28;
    static final int O_RDWR = 2;
    static final long TIOCSCTTY = 0x540E;
    static final long FIONREAD = 0x541B;
    static final int PR_SET_SECCOMP = 22;
    static final int PR_SET_NO_NEW_PRIVS = 38;
    static final int SECCOMP_MODE_FILTER = 2;

    /** In {@link Spawn#stdio}: open {@code /dev/null} there. */
    static final int DEV_NULL = -2;

    /** Descriptors passed with {@link #recvmsg} at most, per call. */
    static final int MAX_FDS = 8;

    // The C library, as is. Each returns -1 and sets errno (thrown) on failure.
    static native long recvmsg(int fd, Pointer msg, int flags) throws LastErrorException;
    static native long sendmsg(int fd, Pointer msg, int flags) throws LastErrorException;
    static native long write(int fd, byte[] buf, long count) throws LastErrorException;
    static native long read(int fd, byte[] buf, long count) throws LastErrorException;
    static native int close(int fd) throws LastErrorException;
    static native int dup2(int from, int to) throws LastErrorException;
    static native int dup(int fd) throws LastErrorException;
    static native int ioctl(int fd, long request, long arg) throws LastErrorException;
    static native long readlink(String path, byte[] buf, long size) throws LastErrorException;
    static native int pipe2(int[] fds, int flags) throws LastErrorException;
    static native int socketpair(int domain, int type, int protocol, int[] fds) throws LastErrorException;
    static native int kill(int pid, int sig) throws LastErrorException;
    static native int waitpid(int pid, int[] status, int options) throws LastErrorException;
    static native int umask(int mask);
    static native int setenv(String name, String value, int overwrite) throws LastErrorException;
    static native int clearenv();
    static native Pointer signal(int sig, Pointer handler);
    static native int getpid();
    static native int posix_spawn(int[] pid, String path, Pointer actions, Pointer attr, Pointer argv, Pointer envp);
    static native int posix_spawn_file_actions_init(Pointer actions);
    static native int posix_spawn_file_actions_destroy(Pointer actions);
    static native int posix_spawn_file_actions_adddup2(Pointer actions, int fd, int newfd);
    static native int posix_spawn_file_actions_addclose(Pointer actions, int fd);
    static native int posix_spawn_file_actions_addopen(Pointer actions, int fd, String path, int flags, int mode);
    static native int posix_spawn_file_actions_addchdir_np(Pointer actions, String path);
    static native int posix_spawn_file_actions_addclosefrom_np(Pointer actions, int from);
    static native int posix_spawnattr_init(Pointer attr);
    static native int posix_spawnattr_destroy(Pointer attr);
    static native int posix_spawnattr_setflags(Pointer attr, short flags);
    static native int posix_spawnattr_setsigdefault(Pointer attr, Pointer set);
    static native int posix_spawnattr_setsigmask(Pointer attr, Pointer set);
    static native int sigemptyset(Pointer set);
    static native int sigfillset(Pointer set);
    static native int sigdelset(Pointer set, int sig);
    static native int sigaddset(Pointer set, int sig);
    static native int isatty(int fd);
    static native int gettid();
    static native int prctl(int option, long arg2, long arg3, long arg4, long arg5) throws LastErrorException;
    static native int fcntl(int fd, int cmd, int arg) throws LastErrorException;
    static native int open(String path, int flags) throws LastErrorException;

    /** Bytes received and the descriptors that came with them. */
    record Received(int length, int[] fds) {}

    /**
     * Receives into {@code buf} with {@code recvmsg}, close-on-exec descriptors included;
     * length 0 is the end of the stream. Retries on EINTR.
     */
    static Received recv(int fd, byte[] buf) throws IOException {
        int cmsgSpace = 16 + align8(4 * MAX_FDS);
        try (Memory data = new Memory(buf.length); Memory iov = new Memory(16); Memory msg = new Memory(56);
                Memory control = new Memory(cmsgSpace)) {
            iov.setPointer(0, data);
            iov.setLong(8, buf.length);
            msg.clear();
            msg.setPointer(16, iov);
            msg.setLong(24, 1);
            msg.setPointer(32, control);
            msg.setLong(40, cmsgSpace);
            long n;
            while (true) {
                try {
                    n = recvmsg(fd, msg, MSG_CMSG_CLOEXEC);
                    break;
                } catch (LastErrorException e) {
                    if (e.getErrorCode() != EINTR) {
                        throw new IOException("recvmsg: " + e.getMessage());
                    }
                }
            }
            data.read(0, buf, 0, (int) n);
            int[] fds = new int[0];
            long controlLen = msg.getLong(40);
            long off = 0;
            while (off + 16 <= controlLen) {
                long len = control.getLong(off);
                int level = control.getInt(off + 8);
                int type = control.getInt(off + 12);
                if (len < 16) {
                    break;
                }
                if (level == SOL_SOCKET && type == SCM_RIGHTS) {
                    int count = (int) ((len - 16) / 4);
                    int[] more = control.getIntArray(off + 16, count);
                    int[] all = new int[fds.length + count];
                    System.arraycopy(fds, 0, all, 0, fds.length);
                    System.arraycopy(more, 0, all, fds.length, count);
                    fds = all;
                }
                off += align8(len);
            }
            return new Received((int) n, fds);
        }
    }

    /** Sends all of {@code buf}, the descriptors {@code fds} with its first byte. */
    static void send(int fd, byte[] buf, int[] fds) throws IOException {
        int cmsgSpace = fds.length == 0 ? 0 : 16 + align8(4 * fds.length);
        try (Memory data = new Memory(Math.max(1, buf.length)); Memory iov = new Memory(16);
                Memory msg = new Memory(56); Memory control = new Memory(Math.max(1, cmsgSpace))) {
            data.write(0, buf, 0, buf.length);
            iov.setPointer(0, data);
            iov.setLong(8, buf.length);
            msg.clear();
            msg.setPointer(16, iov);
            msg.setLong(24, 1);
            if (fds.length > 0) {
                control.clear();
                control.setLong(0, 16 + 4L * fds.length);
                control.setInt(8, SOL_SOCKET);
                control.setInt(12, SCM_RIGHTS);
                control.write(16, fds, 0, fds.length);
                msg.setPointer(32, control);
                msg.setLong(40, cmsgSpace);
            }
            long n = sendmsg(fd, msg, 0x4000 /* MSG_NOSIGNAL */);
            if (n < buf.length) {
                writeAll(fd, java.util.Arrays.copyOfRange(buf, (int) n, buf.length));
            }
        } catch (LastErrorException e) {
            throw new IOException("sendmsg: " + e.getMessage());
        }
    }

    /** Writes all of {@code buf}; retries on EINTR. */
    static void writeAll(int fd, byte[] buf) throws IOException {
        int off = 0;
        while (off < buf.length) {
            byte[] rest = off == 0 ? buf : java.util.Arrays.copyOfRange(buf, off, buf.length);
            try {
                off += (int) write(fd, rest, rest.length);
            } catch (LastErrorException e) {
                if (e.getErrorCode() != EINTR) {
                    throw new IOException("write: " + e.getMessage());
                }
            }
        }
    }

    /** Reads up to {@code buf.length} bytes; 0 at end of file; retries on EINTR. */
    static int readSome(int fd, byte[] buf) throws IOException {
        while (true) {
            try {
                return (int) read(fd, buf, buf.length);
            } catch (LastErrorException e) {
                if (e.getErrorCode() != EINTR) {
                    throw new IOException("read: " + e.getMessage());
                }
            }
        }
    }

    /** Closes {@code fd}, ignoring errors (it is gone either way). */
    static void closeQuietly(int fd) {
        if (fd >= 0) {
            try {
                close(fd);
            } catch (LastErrorException e) {
                // EBADF or EINTR: the descriptor is released in both cases on Linux.
            }
        }
    }

    /** {@code F_DUPFD_CLOEXEC}: a close-on-exec copy at the lowest free number from a minimum. */
    static final int F_DUPFD_CLOEXEC = 1030;

    /** A close-on-exec copy of {@code fd} numbered {@code min} or above. */
    static int dupAbove(int fd, int min) throws IOException {
        try {
            return fcntl(fd, F_DUPFD_CLOEXEC, min);
        } catch (LastErrorException e) {
            throw new IOException("fcntl: " + e.getMessage());
        }
    }

    /** {@code /dev/null}, opened for reading and writing, close-on-exec. */
    static int openDevNull() throws IOException {
        try {
            return open("/dev/null", O_RDWR | O_CLOEXEC);
        } catch (LastErrorException e) {
            throw new IOException("open /dev/null: " + e.getMessage());
        }
    }

    /** A close-on-exec Unix socketpair. */
    static int[] socketPair() throws IOException {
        int[] fds = new int[2];
        try {
            socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds);
        } catch (LastErrorException e) {
            throw new IOException("socketpair: " + e.getMessage());
        }
        return fds;
    }

    /** A close-on-exec pipe: read end, write end. */
    static int[] pipe() throws IOException {
        int[] fds = new int[2];
        try {
            pipe2(fds, O_CLOEXEC);
        } catch (LastErrorException e) {
            throw new IOException("pipe: " + e.getMessage());
        }
        return fds;
    }

    /**
     * What a child is to start with. With {@code ctty} (a terminal's path), the child, a
     * session leader, opens it first, which makes it its controlling terminal.
     */
    record Spawn(String path, List<String> argv, List<String> env, String cwd, int[] stdio, int extraFd,
            String ctty) {
        Spawn(String path, List<String> argv, List<String> env, String cwd, int[] stdio, int extraFd) {
            this(path, argv, env, cwd, stdio, extraFd, null);
        }
    }

    /** The path {@code fd} was opened by ({@code /proc/self/fd}), as bytes ({@link #raw}). */
    static String path(int fd) throws IOException {
        byte[] buf = new byte[4096];
        try {
            long n = readlink("/proc/self/fd/" + fd, buf, buf.length);
            return new String(buf, 0, (int) n, java.nio.charset.StandardCharsets.ISO_8859_1);
        } catch (LastErrorException e) {
            throw new IOException("readlink: " + e.getMessage());
        }
    }

    /**
     * Runs the job's anchor ({@code ng} with argv[0] {@code ng:anchor}, docs/ngw.md 15.7) for
     * this process, a session leader with a controlling terminal, and waits for it: true once
     * a member of this process's group has a parent in another group of the session, so that
     * the terminal's {@code ^Z} stops the group. The spawned process is gone when this returns.
     */
    static boolean anchor(String ng) {
        StringArray argv = new StringArray(new String[] {"ng:anchor", Long.toString(ProcessHandle.current().pid())});
        StringArray envp = new StringArray(new String[0]);
        int[] pid = new int[1];
        if (posix_spawn(pid, ng, null, null, argv, envp) != 0) {
            return false;
        }
        int[] st = new int[1];
        try {
            waitpid(pid[0], st, 0);
        } catch (LastErrorException e) {
            return false;
        }
        return st[0] == 0;
    }

    /** Makes {@code fd}, a terminal, the calling session leader's controlling terminal. */
    static void controllingTerminal(int fd) throws IOException {
        try {
            ioctl(fd, TIOCSCTTY, 0);
        } catch (LastErrorException e) {
            throw new IOException("TIOCSCTTY: " + e.getMessage());
        }
    }

    /**
     * Starts {@code s.path} in a new session (its own process group), with descriptor
     * {@code s.stdio[i]} as fd i (an absent one, -1, closed; {@link #DEV_NULL}: /dev/null), {@code s.extraFd} as fd 3 if not
     * -1, nothing else inherited, every signal at its default and none blocked. Returns the
     * pid.
     */
    static int spawn(Spawn s) throws IOException {
        try (Memory actions = new Memory(256); Memory attr = new Memory(512); Memory set = new Memory(128)) {
            posix_spawn_file_actions_init(actions);
            posix_spawnattr_init(attr);
            try {
                // Move the sources above every source first, so that no dup2 clobbers a
                // source still to be used.
                int base = Math.max(10, s.extraFd + 1);
                for (int f : s.stdio) {
                    base = Math.max(base, f + 1);
                }
                if (s.ctty != null) {
                    // Opened without O_NOCTTY by a session leader with none: its terminal.
                    check(posix_spawn_file_actions_addopen(actions, base + 4, s.ctty, O_RDWR, 0), "addopen");
                    check(posix_spawn_file_actions_addclose(actions, base + 4), "addclose");
                }
                for (int i = 0; i < 3; i++) {
                    if (s.stdio[i] >= 0) {
                        check(posix_spawn_file_actions_adddup2(actions, s.stdio[i], base + i), "adddup2");
                    }
                }
                if (s.extraFd >= 0) {
                    check(posix_spawn_file_actions_adddup2(actions, s.extraFd, base + 3), "adddup2");
                }
                for (int i = 0; i < 3; i++) {
                    if (s.stdio[i] >= 0) {
                        check(posix_spawn_file_actions_adddup2(actions, base + i, i), "adddup2");
                    } else if (s.stdio[i] == DEV_NULL) {
                        check(posix_spawn_file_actions_addopen(actions, i, "/dev/null", O_RDONLY, 0), "addopen");
                    } else {
                        check(posix_spawn_file_actions_addclose(actions, i), "addclose");
                    }
                }
                if (s.extraFd >= 0) {
                    check(posix_spawn_file_actions_adddup2(actions, base + 3, 3), "adddup2");
                }
                check(posix_spawn_file_actions_addclosefrom_np(actions, s.extraFd >= 0 ? 4 : 3), "addclosefrom");
                if (s.cwd != null) {
                    check(posix_spawn_file_actions_addchdir_np(actions, s.cwd), "addchdir");
                }
                sigfillset(set);
                check(posix_spawnattr_setsigdefault(attr, set), "setsigdefault");
                sigemptyset(set);
                check(posix_spawnattr_setsigmask(attr, set), "setsigmask");
                check(posix_spawnattr_setflags(attr,
                        (short) (POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK)), "setflags");
                StringArray argv = new StringArray(s.argv.toArray(new String[0]));
                StringArray envp = new StringArray(s.env.toArray(new String[0]));
                int[] pid = new int[1];
                int rc = posix_spawn(pid, s.path, actions, attr, argv, envp);
                if (rc != 0) {
                    throw new IOException("cannot start " + s.path + ": errno " + rc);
                }
                return pid[0];
            } finally {
                posix_spawn_file_actions_destroy(actions);
                posix_spawnattr_destroy(attr);
            }
        }
    }

    private static void check(int rc, String what) throws IOException {
        if (rc != 0) {
            throw new IOException("posix_spawn " + what + ": errno " + rc);
        }
    }

    /** How a child changed state ({@code waitpid} with {@code WUNTRACED}). */
    record Status(boolean stopped, boolean signaled, int code, int signal, boolean core) {}

    /** Waits for {@code pid} to exit, die or stop. Retries on EINTR. */
    static Status waitFor(int pid) throws IOException {
        int[] st = new int[1];
        while (true) {
            try {
                waitpid(pid, st, WUNTRACED);
                break;
            } catch (LastErrorException e) {
                if (e.getErrorCode() != EINTR) {
                    throw new IOException("waitpid: " + e.getMessage());
                }
            }
        }
        int s = st[0];
        if ((s & 0xff) == 0x7f) {
            return new Status(true, false, 0, (s >> 8) & 0xff, false);
        }
        if ((s & 0x7f) == 0) {
            return new Status(false, false, (s >> 8) & 0xff, 0, false);
        }
        return new Status(false, true, 0, s & 0x7f, (s & 0x80) != 0);
    }

    /** Sends {@code sig} to {@code pid} (a negative pid: a process group); false if it is gone. */
    static boolean signal(int pid, int sig) {
        try {
            kill(pid, sig);
            return true;
        } catch (LastErrorException e) {
            return false;
        }
    }

    /** Whether {@code fd} is a terminal. */
    static boolean isTerminal(int fd) {
        return isatty(fd) == 1;
    }

    /** The bytes waiting to be read on {@code fd}, a pipe or socket ({@code FIONREAD}). */
    static int pending(int fd) throws IOException {
        try (Memory n = new Memory(4)) {
            n.setInt(0, 0);
            ioctl(fd, FIONREAD, Pointer.nativeValue(n));
            return n.getInt(0);
        } catch (LastErrorException e) {
            throw new IOException("FIONREAD: " + e.getMessage());
        }
    }

    /** The calling thread's id in the kernel ({@code /proc/self/task/<id>}). */
    static int threadId() {
        return gettid();
    }

    /**
     * Confines the calling thread, and the threads it starts from now on, with a seccomp
     * filter: {@code program} holds classic BPF instructions, each {@code code << 48 | jt << 40
     * | jf << 32 | k}. Other threads of the process are not affected; the calling thread
     * stays confined until it ends.
     */
    static void confineThread(long[] program) throws IOException {
        try (Memory filter = new Memory(8L * program.length); Memory prog = new Memory(16)) {
            for (int i = 0; i < program.length; i++) {
                long op = program[i];
                filter.setShort(8L * i, (short) (op >>> 48));
                filter.setByte(8L * i + 2, (byte) (op >>> 40));
                filter.setByte(8L * i + 3, (byte) (op >>> 32));
                filter.setInt(8L * i + 4, (int) op);
            }
            prog.clear();
            prog.setShort(0, (short) program.length);
            prog.setPointer(8, filter);
            prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
            prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, Pointer.nativeValue(prog), 0, 0);
        } catch (LastErrorException e) {
            throw new IOException("seccomp: " + e.getMessage());
        }
    }

    /** Sets {@code sig} to be ignored. */
    static void ignore(int sig) {
        signal(sig, new Pointer(1)); // SIG_IGN
    }

    private static long align8(long n) {
        return (n + 7) & ~7L;
    }

    private static int align8(int n) {
        return (n + 7) & ~7;
    }
}
