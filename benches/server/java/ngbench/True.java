package ngbench;

import com.martiansoftware.nailgun.NGContext;

/**
 * Returns at once (exit 0) without reading stdin or writing anything: the Java server's
 * equivalent of ngd's `ng-true`, a latency probe that measures the server and protocol
 * only.
 */
public class True {
    public static void nailMain(NGContext ctx) {
    }
}
