#!/usr/bin/env python3
import sys, json
init = json.loads(sys.stdin.readline())
print(json.dumps({"type": "output", "text": "hello " + " ".join(init["args"]) + "\n"}), flush=True)
