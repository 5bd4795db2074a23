#!/usr/bin/env python3
import sys, json, os
def send(m): print(json.dumps(m), flush=True)
def recv(): return json.loads(sys.stdin.readline())
init = recv()
send({"type": "log", "level": "info", "message": f"args={init['args']}"})
send({"type": "output", "text": f"hello from demo, FLEDGE_PLUGIN_DIR={os.environ.get('FLEDGE_PLUGIN_DIR')}\n"})
send({"type": "output", "text": "init=" + json.dumps(init, sort_keys=True) + "\n"})
send({"type": "bogus_type", "x": 1})
send({"type": "store", "key": "k", "value": "v1"})
send({"type": "load", "id": "1", "key": "k"})
load = recv()["value"]
send({"type": "exec", "id": "2", "command": "echo hi; exit 3", "timeout": 5})
ex = recv()["value"]
send({"type": "metadata", "id": "3", "keys": ["git_status"]})
meta = recv()["value"]
send({"type": "output", "text": f"load={load} exec={ex} meta={meta}\n"})
