#!/usr/bin/env python3
import sys, json, time
def send(m): print(json.dumps(m), flush=True)
def recv(): return json.loads(sys.stdin.readline())
init = recv()
slow = "slow" in init["args"]
send({"type": "prompt", "id": "1", "message": "Name:", "default": "world", "validate": "non_empty"})
name = recv()["value"]
send({"type": "confirm", "id": "2", "message": "Loud?", "default": True})
loud = recv()["value"]
send({"type": "select", "id": "3", "message": "Env:", "options": ["dev", "staging", "production"], "default": 1})
env = recv()["value"]
send({"type": "multi_select", "id": "4", "message": "Regions:", "options": ["us", "eu", "ap"], "defaults": [0]})
regions = recv()["value"]
for i in range(4):
    send({"type": "progress", "message": "Working", "current": i, "total": 3})
    if slow:
        time.sleep(0.3)
send({"type": "progress", "done": True})
send({"type": "output", "text": json.dumps({"name": name, "loud": loud, "env": env, "regions": regions}) + "\n"})
