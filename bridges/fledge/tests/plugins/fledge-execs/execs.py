#!/usr/bin/env python3
import sys, json, os
def send(m): print(json.dumps(m), flush=True)
def recv(): return json.loads(sys.stdin.readline())
init = recv()
send({"type": "exec", "id": "t", "command": "echo start; sleep 30; echo never", "timeout": 1})
send({"type": "output", "text": json.dumps(recv()["value"], sort_keys=True) + "\n"})
marker = os.path.join(init["project"]["root"], "..", "escaped")
send({"type": "exec", "id": "e", "command": "touch escaped", "cwd": ".."})
send({"type": "output", "text": json.dumps(recv()["value"], sort_keys=True) + "\n"})
send({"type": "output", "text": f"marker exists: {os.path.exists(marker)}\n"})
send({"type": "exec", "id": "p", "command": "basename \"$PWD\"", "cwd": init["plugin"]["dir"]})
send({"type": "output", "text": json.dumps(recv()["value"], sort_keys=True) + "\n"})
