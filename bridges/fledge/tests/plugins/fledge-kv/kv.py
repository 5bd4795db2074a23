#!/usr/bin/env python3
import sys, json
def send(m): print(json.dumps(m), flush=True)
def recv(): return json.loads(sys.stdin.readline())
init = recv()
args = init["args"]
if args[0] == "set":
    send({"type": "store", "key": args[1], "value": args[2]})
    send({"type": "output", "text": "stored\n"})
elif args[0] == "get":
    send({"type": "load", "id": "g", "key": args[1]})
    send({"type": "output", "text": json.dumps(recv()["value"]) + "\n"})
elif args[0] == "meta":
    send({"type": "metadata", "id": "m", "keys": args[1:]})
    v = recv()["value"]
    send({"type": "output", "text": json.dumps(sorted(v.keys())) + "\n"})
    if "env" in v:
        send({"type": "output", "text": "SECRET_TOKEN" + (" shown" if "SECRET_TOKEN" in v["env"] else " hidden") + "\n"})
