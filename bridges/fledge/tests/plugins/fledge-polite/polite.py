#!/usr/bin/env python3
import sys, json, os
def send(m): print(json.dumps(m), flush=True)
def recv(): return json.loads(sys.stdin.readline())
init = recv()
sys.stderr.write("polite: stderr is a terminal: %s\n" % os.isatty(2)); sys.stderr.flush()
send({"type": "select", "id": "1", "message": "Pick one:", "options": ["alpha", "beta", "gamma"]})
m = recv()
if m.get("type") == "cancel":
    sys.stderr.write("polite: cancelled (%s)\n" % m["reason"]); sys.stderr.flush()
    sys.exit(130)
send({"type": "log", "level": "info", "message": "polite: thanks"})
send({"type": "output", "text": "picked %s\n" % m["value"]})
