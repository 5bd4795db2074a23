/**
 * What a spare's thread that initialises the main class ahead ({@link SpareInit}) may not do:
 * anything only a session may, since that thread runs before any session exists. It is a
 * seccomp filter (classic BPF, Linux on x86-64) installed on that thread alone; a system call
 * it forbids kills the thread before the call happens, so the effect never takes place and
 * the spare sees the thread gone ({@code /proc/self/task}).
 *
 * <p>Forbidden: reading, writing, seeking, closing or replacing descriptors 0-2; opening a
 * file for writing ({@code O_WRONLY}, {@code O_RDWR}, {@code O_CREAT}, {@code O_TRUNC},
 * {@code O_APPEND}) and every call that changes the file system (create, link, rename,
 * remove, truncate, change mode, owner, times or extended attributes, lock); starting a
 * process, signalling another one, connecting, binding or sending on a socket, copying
 * between descriptors in the kernel; changing the process's directory, umask, signal
 * dispositions, session or group; System V IPC, message queues, namespaces. {@code clone}
 * may start threads only; {@code clone3}, {@code openat2} and {@code io_uring_setup}, whose
 * arguments a filter cannot read, fail with {@code ENOSYS} (the C library falls back to the
 * calls it can read). Reading files, mapping memory and starting threads are allowed.
 */
package ngw.exact;

import java.util.ArrayList;
import java.util.List;

/** See the file comment. */
final class Guard {
    private Guard() {}

    static final int AUDIT_ARCH_X86_64 = 0xC000003E;
    static final int RET_KILL_THREAD = 0;
    static final int RET_ERRNO = 0x00050000;
    static final int RET_ALLOW = 0x7FFF0000;
    static final int ENOSYS = 38;
    private static final int LD_W_ABS = 0x20;
    private static final int JEQ = 0x15;
    private static final int JGE = 0x35;
    private static final int JSET = 0x45;
    private static final int RET = 0x06;
    /** Offsets in {@code struct seccomp_data}. */
    private static final int NR = 0;
    private static final int ARCH = 4;
    /** The x32 ABI's calls have this bit set. */
    private static final int X32 = 0x40000000;
    private static final int CLONE_THREAD = 0x10000;
    /** {@code O_WRONLY | O_RDWR | O_CREAT | O_TRUNC | O_APPEND}. */
    private static final int WRITE_FLAGS = 0x1 | 0x2 | 0x40 | 0x200 | 0x400;

    /** x86-64 calls forbidden whatever their arguments. */
    static final int[] FORBIDDEN = {
        13, // rt_sigaction
        29, 64, 65, 68, 69, 240, // shmget, semget, semop, msgget, msgsnd, mq_open
        40, 275, 276, 278, 326, // sendfile, splice, tee, vmsplice, copy_file_range
        42, 44, 46, 49, 50, 307, // connect, sendto, sendmsg, bind, listen, sendmmsg
        57, 58, 59, 322, // fork, vfork, execve, execveat
        62, 200, 129, 297, 424, 311, 101, // kill, tkill, rt_(tg)sigqueueinfo, pidfd_send_signal, process_vm_writev, ptrace
        73, // flock
        76, 77, 285, // truncate, ftruncate, fallocate
        80, 81, 95, 109, 112, // chdir, fchdir, umask, setpgid, setsid
        82, 83, 84, 85, 86, 87, 88, 133, // rename, mkdir, rmdir, creat, link, unlink, symlink, mknod
        258, 259, 263, 264, 265, 266, 316, // mkdirat, mknodat, unlinkat, renameat, linkat, symlinkat, renameat2
        90, 91, 92, 93, 94, 260, 268, 452, // chmod, fchmod, chown, fchown, lchown, fchownat, fchmodat, fchmodat2
        132, 235, 261, 280, // utime, utimes, futimesat, utimensat
        188, 189, 190, 197, 198, 199, // setxattr, lsetxattr, fsetxattr, removexattr, ...
        272, 308, // unshare, setns
    };

    /** Calls that fail with {@code ENOSYS}: clone3, openat2, io_uring_setup. */
    static final int[] UNAVAILABLE = {435, 437, 425};

    /** {call, argument}: forbidden when that argument, a descriptor, is 0, 1 or 2. */
    static final int[][] ON_STDIO = {
        {0, 0}, {17, 0}, {19, 0}, {295, 0}, {327, 0}, // read, pread64, readv, preadv, preadv2
        {1, 0}, {18, 0}, {20, 0}, {296, 0}, {328, 0}, // write, pwrite64, writev, pwritev, pwritev2
        {45, 0}, {47, 0}, {299, 0}, // recvfrom, recvmsg, recvmmsg
        {3, 0}, {8, 0}, // close, lseek
        {33, 1}, {292, 1}, // dup2, dup3 onto 0-2
    };

    /** {call, argument}: forbidden when that argument, open flags, asks to write. */
    static final int[][] OPEN_FLAGS = {{2, 1}, {257, 2}};

    /** Whether this system can run the guard. */
    static boolean supported() {
        return System.getProperty("os.name", "").equals("Linux") && System.getProperty("os.arch", "").equals("amd64");
    }

    /** The filter, for a process whose id is {@code pid} (it may signal its own threads). */
    static long[] program(long pid) {
        List<Long> p = new ArrayList<>();
        op(p, LD_W_ABS, 0, 0, ARCH);
        op(p, JEQ, 1, 0, AUDIT_ARCH_X86_64);
        op(p, RET, 0, 0, RET_KILL_THREAD);
        op(p, LD_W_ABS, 0, 0, NR);
        op(p, JGE, 0, 1, X32);
        op(p, RET, 0, 0, RET_KILL_THREAD);
        for (int nr : FORBIDDEN) {
            op(p, JEQ, 0, 1, nr);
            op(p, RET, 0, 0, RET_KILL_THREAD);
        }
        for (int nr : UNAVAILABLE) {
            op(p, JEQ, 0, 1, nr);
            op(p, RET, 0, 0, RET_ERRNO | ENOSYS);
        }
        for (int[] c : ON_STDIO) {
            op(p, JEQ, 0, 4, c[0]);
            op(p, LD_W_ABS, 0, 0, arg(c[1]));
            op(p, JGE, 1, 0, 3);
            op(p, RET, 0, 0, RET_KILL_THREAD);
            op(p, RET, 0, 0, RET_ALLOW);
        }
        for (int[] c : OPEN_FLAGS) {
            op(p, JEQ, 0, 4, c[0]);
            op(p, LD_W_ABS, 0, 0, arg(c[1]));
            op(p, JSET, 0, 1, WRITE_FLAGS);
            op(p, RET, 0, 0, RET_KILL_THREAD);
            op(p, RET, 0, 0, RET_ALLOW);
        }
        // clone: threads only.
        op(p, JEQ, 0, 4, 56);
        op(p, LD_W_ABS, 0, 0, arg(0));
        op(p, JSET, 1, 0, CLONE_THREAD);
        op(p, RET, 0, 0, RET_KILL_THREAD);
        op(p, RET, 0, 0, RET_ALLOW);
        // tgkill: this process's own threads only.
        op(p, JEQ, 0, 4, 234);
        op(p, LD_W_ABS, 0, 0, arg(0));
        op(p, JEQ, 1, 0, (int) pid);
        op(p, RET, 0, 0, RET_KILL_THREAD);
        op(p, RET, 0, 0, RET_ALLOW);
        op(p, RET, 0, 0, RET_ALLOW);
        return p.stream().mapToLong(Long::longValue).toArray();
    }

    /** The offset of argument {@code i}'s low 32 bits (little-endian). */
    private static int arg(int i) {
        return 16 + 8 * i;
    }

    private static void op(List<Long> p, int code, int jt, int jf, int k) {
        p.add(((long) code << 48) | ((long) (jt & 0xFF) << 40) | ((long) (jf & 0xFF) << 32) | (k & 0xFFFFFFFFL));
    }
}
