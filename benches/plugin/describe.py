"""What a process sees of its invocation (argv, cwd, umask, environment), as JSON.

`python3 benches/plugin/describe.py ARGS...` prints it for a cold process; the py-env
command of worker.py prints the same from a fork-mode child, and benches/plugin-bench
compares the two.
"""

import json
import os
import sys


def describe():
    umask = os.umask(0)
    os.umask(umask)
    return {"args": sys.argv[1:], "cwd": os.getcwd(), "umask": umask, "env": dict(os.environ)}


if __name__ == "__main__":
    sys.stdout.write(json.dumps(describe()) + "\n")
