/**
 * The server as a nail sees it (0.9 API): in ngd's JVM worker, the worker. {@code
 * shutdown} retires the worker (it takes no more sessions and exits once the running ones
 * end; ngd starts a fresh one); it never stops ngd.
 */
package com.martiansoftware.nailgun;

import java.io.InputStream;
import java.io.PrintStream;
import java.util.Map;
import java.util.TreeMap;

import ngw.NailSession;

/** See the file comment. */
public class NGServer {
    /** The worker's own stdout (its log). */
    public final PrintStream out;
    /** The worker's own stderr (its log). */
    public final PrintStream err;
    /** The worker's own stdin. */
    public final InputStream in;

    private final NailSession.WorkerView worker;

    NGServer(NailSession.WorkerView worker) {
        this.worker = worker;
        this.out = worker.out();
        this.err = worker.err();
        this.in = worker.in();
    }

    public AliasManager getAliasManager() {
        return new AliasManager(worker);
    }

    public boolean allowsNailsByClassName() {
        return worker.nailsByClassName();
    }

    /** Runs and running sessions per nail class name, as {@code "runs/running"}. */
    public Map<String, String> getNailStats() {
        Map<String, String> m = new TreeMap<>();
        worker.stats().forEach((k, v) -> m.put(k, v[0] + "/" + v[1]));
        return m;
    }

    /** Retires the worker; {@code exitVM} is ignored (the worker always exits when idle). */
    public void shutdown(boolean exitVM) {
        worker.retire("a nail called NGServer.shutdown");
    }

    public boolean isRunning() {
        return true;
    }

    /** No port: the worker speaks to ngd over a socketpair. */
    public int getPort() {
        return 0;
    }

    public int getHeartbeatTimeout() {
        return 10000;
    }
}
