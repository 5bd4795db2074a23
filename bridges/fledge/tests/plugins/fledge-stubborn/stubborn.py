#!/usr/bin/env python3
import sys, json, signal, os, time
init = json.loads(sys.stdin.readline())
def on_term(signum, frame):
    sys.stderr.write("stubborn: got SIGTERM\n"); sys.stderr.flush()
    if "ignore-term" not in init["args"]:
        os._exit(42)
signal.signal(signal.SIGTERM, on_term)
signal.signal(signal.SIGINT, signal.SIG_IGN)
print(json.dumps({"type": "prompt", "id": "1", "message": "Waiting:"}), flush=True)
line = sys.stdin.readline()
sys.stderr.write("stubborn: received " + line.strip() + "\n"); sys.stderr.flush()
while True:
    time.sleep(0.1)
