"""The host a script would use without ngd: start the plugin, handshake, make one call,
stop it. Used by benches/jsonrpc-bench as the start-per-call baseline (in-process, so the
figure is the plugin's own start, handshake and call, not this interpreter's start).

call(profile, command, tool, args) -> (result dict, seconds)"""

import json
import subprocess
import time


def _rpc(proc, msg):
    proc.stdin.write((json.dumps(msg) + "\n").encode())
    proc.stdin.flush()
    while True:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError("plugin closed stdout")
        try:
            reply = json.loads(line)
        except ValueError:
            continue
        if reply.get("id") == msg["id"]:
            return reply


def call(profile, command, tool, args):
    t0 = time.perf_counter()
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    if profile == "nexo":
        _rpc(proc, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}})
        reply = _rpc(proc, {"jsonrpc": "2.0", "id": 2, "method": "tool.invoke",
                            "params": {"tool_name": tool, "args": args}})
        _rpc(proc, {"jsonrpc": "2.0", "id": 3, "method": "shutdown"})
    else:
        _rpc(proc, {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                    "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                               "clientInfo": {"name": "bench", "version": "0"}}})
        proc.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        reply = _rpc(proc, {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                            "params": {"name": tool, "arguments": args}})
    proc.stdin.close()
    proc.wait()
    return reply.get("result"), time.perf_counter() - t0


class Warm:
    """The plugin kept running, called directly over its pipes (the tool's own work plus
    one JSON-RPC round trip, no ngd)."""

    def __init__(self, profile, command):
        self.profile = profile
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL)
        self.next = 10
        if profile == "nexo":
            _rpc(self.proc, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}})
        else:
            _rpc(self.proc, {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                             "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                                        "clientInfo": {"name": "bench", "version": "0"}}})
            self.proc.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')

    def call(self, tool, args):
        """One call, shaped as the bridge shapes it (for MCP, `_meta.progressToken` = the
        request id: servers do work for it)."""
        self.next += 1
        if self.profile == "nexo":
            msg = {"jsonrpc": "2.0", "id": self.next, "method": "tool.invoke",
                   "params": {"tool_name": tool, "args": args}}
        else:
            msg = {"jsonrpc": "2.0", "id": self.next, "method": "tools/call",
                   "params": {"name": tool, "arguments": args,
                              "_meta": {"progressToken": self.next}}}
        t0 = time.perf_counter()
        reply = _rpc(self.proc, msg)
        return reply.get("result"), time.perf_counter() - t0

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()
