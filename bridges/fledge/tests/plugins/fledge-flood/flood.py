#!/usr/bin/env python3
import sys, json
init = json.loads(sys.stdin.readline())
n = int(init["args"][0])
line = "x" * 100
out = sys.stdout
for i in range(n):
    out.write(json.dumps({"type": "output", "text": f"{i:06d} {line}\n"}) + "\n")
    if i % 1000 == 0:
        sys.stderr.write(f"progress {i}\n")
out.write(json.dumps({"type": "output", "text": "x" * 1000000 + "\n"}) + "\n")
out.flush()
