"""Entry points benches/plugin-bench adds to the aws plugin's worker (the zygote that has
awscli preloaded), to take the warm `aws` time apart:

  aws-noop=ngbench_aws:noop         returns at once: the floor of a fork-mode command
                                    forked from *this* zygote (its size is what fork copies)
  aws-timed=ngbench_aws:timed_main  awscli.clidriver.main(), as `aws` runs it, then one
                                    line on stderr with the time main() took in the child,
                                    the child's CPU time and page faults since the fork,
                                    and how many modules main() imported (what more
                                    --preload modules could save)

Only the bench's own command names run these; `aws` itself is served unchanged.
"""

import os
import resource
import sys
import time

MARK = "ngbench-child:"


def noop():
    return 0


def timed_main():
    import awscli.clidriver

    before = len(sys.modules)
    start = time.perf_counter()
    try:
        return awscli.clidriver.main()
    finally:
        took = time.perf_counter() - start
        # getrusage(RUSAGE_SELF) in a forked child counts from the fork (Linux resets it).
        ru = resource.getrusage(resource.RUSAGE_SELF)
        os.write(2, ("\n%s main_ms=%.3f user_ms=%.3f sys_ms=%.3f minflt=%d new_modules=%d\n" % (
            MARK, took * 1e3, ru.ru_utime * 1e3, ru.ru_stime * 1e3, ru.ru_minflt,
            len(sys.modules) - before)).encode())
