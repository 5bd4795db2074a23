#!/usr/bin/env python3
"""Records real Nailgun sessions as transcripts for proto/tests/data/peer-*.hex.

Starts the reference Java server (Debian's nailgun 0.9.3 jar) with the test nails in t/ on
a free loopback port, runs the reference C client `ng-nailgun` through a logging TCP proxy for
each scenario below, and writes one transcript per scenario.

The client runs under `env -i` (plus the scenario's own variables) in /tmp, so the header is
the same on every machine. The proxy logs every byte with the time it passed; each direction
is then cut into whole chunks, and the chunks of both directions are merged in the order in
which their last byte passed the proxy. So a transcript keeps the causal order (an `S`
before the `0` it allows) but not the read boundaries: the tests feed every split anyway.

Usage: record.py OUT_DIR   (needs javac, java, ng-nailgun; see capture.sh)
"""

import os
import select
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
JARS = "/usr/share/java/nailgun-server.jar:/usr/share/java/jna.jar"


def chunk_stream(data):
    """Splits one direction's bytes into (end_offset, type, payload) chunks."""
    out, pos = [], 0
    while pos + 5 <= len(data):
        n = int.from_bytes(data[pos:pos + 4], "big")
        end = pos + 5 + n
        if end > len(data):
            break
        out.append((end, chr(data[pos + 4]), data[pos + 5:end]))
        pos = end
    if pos != len(data):
        raise SystemExit(f"trailing partial chunk: {data[pos:]!r}")
    return out


def relay(client_sock, server_addr):
    """Relays one connection both ways; returns the log [(time, dir, bytes)]."""
    server_sock = socket.create_connection(server_addr)
    socks = {client_sock: (server_sock, ">"), server_sock: (client_sock, "<")}
    open_ = {client_sock, server_sock}
    log = []
    deadline = time.monotonic() + 30
    while open_ and time.monotonic() < deadline:
        ready, _, _ = select.select(list(open_), [], [], 0.2)
        for s in ready:
            peer, d = socks[s]
            try:
                data = s.recv(65536)
            except ConnectionResetError:
                data = b""
            if data:
                log.append((time.monotonic(), d, data))
                try:
                    peer.sendall(data)
                except OSError:
                    pass  # e.g. the client already exited on the first X
            else:
                open_.discard(s)
                try:
                    peer.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
    client_sock.close()
    server_sock.close()
    return log


def merge(log):
    """Whole chunks of both directions, in the order their last byte passed the proxy."""
    streams = {">": bytearray(), "<": bytearray()}
    times = {">": [], "<": []}  # (end offset, time) per read
    for t, d, data in log:
        streams[d] += data
        times[d].append((len(streams[d]), t))
    merged = []
    for d in "><":
        for end, ty, payload in chunk_stream(bytes(streams[d])):
            t = next(t for off, t in times[d] if off >= end)
            merged.append((t, d, ty, payload))
    merged.sort(key=lambda c: c[0])
    return merged


def describe(ty, payload):
    if len(payload) > 40:
        text = payload[:40].decode("latin-1")
        shown = repr(text)[1:-1] + f"... ({len(payload)} bytes)"
    else:
        shown = repr(payload.decode("latin-1"))[1:-1]
    return f'{ty} "{shown}"'


def write_transcript(path, title, notes, chunks):
    with open(path, "w") as f:
        f.write(f"# {title}\n")
        for n in notes:
            f.write(f"# {n}\n")
        f.write("# Recorded by proto/tests/data/capture/record.py: Debian nailgun 0.9.3 C client\n")
        f.write("# and server jar, OpenJDK 17, loopback TCP. '>' client to server, '<' server to client.\n")
        for _, d, ty, payload in chunks:
            wire = len(payload).to_bytes(4, "big") + ty.encode("latin-1") + payload
            lines = [wire[i:i + 32] for i in range(0, len(wire), 32)]
            for i, line in enumerate(lines):
                hexed = " ".join(f"{b:02x}" for b in line)
                comment = f"  # {describe(ty, payload)}" if i == 0 else ""
                f.write(f"{d} {hexed}{comment}\n")


def start_server(classes):
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    server = subprocess.Popen(
        ["java", "-cp", f"{JARS}:{classes}", "com.martiansoftware.nailgun.NGServer",
         f"127.0.0.1:{port}"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    banner = server.stdout.readline().decode()
    if "started" not in banner:
        raise SystemExit(f"server did not start: {banner!r}")
    return server, port


def record(server_port, argv, env, stdin_bytes):
    """Runs ng-nailgun ARGV through the proxy; returns (exit status, stdout, log)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    proxy_port = listener.getsockname()[1]
    with tempfile.TemporaryFile() as stdin:
        stdin.write(stdin_bytes)
        stdin.seek(0)
        envs = [f"{k}={v}" for k, v in env]
        client = subprocess.Popen(
            ["env", "-i", *envs, "ng-nailgun", "--nailgun-port", str(proxy_port), *argv],
            stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd="/tmp")
        conn, _ = listener.accept()
        log = relay(conn, ("127.0.0.1", server_port))
        out, err = client.communicate(timeout=30)
    listener.close()
    return client.returncode, out, err, log


def main():
    out_dir = sys.argv[1]
    classes = tempfile.mkdtemp()
    sources = [os.path.join(HERE, "t", f) for f in sorted(os.listdir(os.path.join(HERE, "t")))]
    subprocess.run(["javac", "-d", classes, "-cp", JARS, *sources], check=True)
    filearg = tempfile.NamedTemporaryFile(delete=False)
    filearg.write(bytes((i * 7) % 251 for i in range(2100)))
    filearg.close()
    lines = b"".join(b"line %04d of the five-thousand-byte stdin test...\n" % i for i in range(100))
    scenarios = [
        ("peer-ng-version", "ng-nailgun ng-version (as nailgun.md 6.1)",
         ["ng-version"], [], b""),
        ("peer-echo-hi", "printf 'hi\\n' | ng-nailgun t.Echo (as nailgun.md 6.2)",
         ["t.Echo"], [], b"hi\n"),
        ("peer-echo-5000", "5000 bytes | ng-nailgun t.Echo (reads 1000 at a time)",
         ["t.Echo"], [], lines),
        ("peer-args", "ng-nailgun t.Args a1 '' 'sp ace' --nailgun-filearg F '\u00fc' (F: 2100 bytes)",
         ["t.Args", "a1", "", "sp ace", "--nailgun-filearg", filearg.name, "\u00fc"],
         [("LANG", "C.UTF-8"), ("EQ", "a=b"), ("EMPTY", "")], b""),
        ("peer-exit-42", "ng-nailgun t.Exit 42 (System.exit: 0.9.3 sends X twice)",
         ["t.Exit", "42"], [], b""),
        ("peer-no-such-class", "ng-nailgun no.such.Cmd (stack trace, X 899)",
         ["no.such.Cmd"], [], b""),
        ("peer-sleep", "ng-nailgun t.Sleep 1300 (the idle client sends H)",
         ["t.Sleep", "1300"], [], b""),
    ]
    server, port = start_server(classes)
    try:
        for name, title, argv, env, stdin in scenarios:
            status, out, err, log = record(port, argv, env, stdin)
            notes = [f"client exit status {status}; stdout {len(out)} bytes, stderr {len(err)} bytes;"
                     f" stdin {len(stdin)} bytes"]
            write_transcript(os.path.join(out_dir, name + ".hex"), title, notes, merge(log))
            print(f"{name}: status {status}, {len(log)} reads")
    finally:
        server.terminate()
        server.wait()
        os.unlink(filearg.name)


if __name__ == "__main__":
    main()
