#!/usr/bin/env python3
import sys, json, os
log = os.environ.get("WARM_LOG")
if log:
    with open(log, "a") as f:
        f.write(f"{os.getpid()}\n")
line = sys.stdin.readline()
if not line:
    # End of input before `init`: the host went away without stopping this process.
    if log:
        with open(log, "a") as f:
            f.write(f"eof {os.getpid()}\n")
    sys.exit(3)
init = json.loads(line)
print(json.dumps({"type": "output", "text": f"pid={os.getpid()} cwd={os.getcwd()}\n"}), flush=True)
