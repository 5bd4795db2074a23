'use strict';
// Plays ngd's side of the ngw channel for the tests: starts a real ngw-node with its
// channel on fd 3, reads its hello, and runs sessions, relayed (chunks) or on descriptors
// of the test's own (SCM_RIGHTS), collecting what the worker sends until `X`.

const path = require('path');
const native = require('../lib/native').load();
const wire = require('../lib/wire');

const WORKER = path.join(__dirname, '..', 'bin', 'ngw-node');
const FIXTURE = path.join(__dirname, 'fixtures', 'exact.js');

class Driver {
  // `log`: a file the worker's log goes to (by default the test's stderr).
  constructor(args, { features = 'fds,signals,notices,stdin-window,ctty', env = {}, log = null } = {}) {
    const [ours, theirs] = native.socketpair();
    const base = Object.entries({ ...process.env, ...env }).map(([k, v]) => `${k}=${v}`);
    base.push('NGW_FD=3', 'NGW_VERSION=1', 'NGW_PLUGIN=test', `NGW_HOST_FEATURES=${features}`);
    const logFd = log === null ? 2 : require('fs').openSync(log, 'a');
    this.pid = native.spawn(process.execPath, ['node', WORKER, ...args], base, null, [theirs, 3, logFd, 2], { session: true });
    native.close(theirs);
    if (logFd !== 2) native.close(logFd);
    native.nonblock(ours);
    this.fd = ours;
    this.buf = Buffer.alloc(0);
    this.chunks = [];
    this.notices = [];
  }

  // The next chunk, waiting at most `ms`.
  next(ms = 20000) {
    const deadline = Date.now() + ms;
    while (!this.chunks.length) {
      const left = deadline - Date.now();
      if (left <= 0) throw new Error('timed out waiting for the worker');
      native.poll([this.fd], [1], left);
      const got = native.recv(this.fd, 1 << 20, 0);
      if (got === null) continue;
      if (got.data.length === 0) throw new Error('the worker closed its channel');
      this.buf = Buffer.concat([this.buf, got.data]);
      const [chunks, rest] = wire.split(this.buf);
      this.buf = Buffer.from(rest);
      for (const c of chunks) this.chunks.push({ type: c.type, payload: Buffer.from(c.payload) });
    }
    return this.chunks.shift();
  }

  hello() {
    const c = this.next();
    if (c.type !== 'h') throw new Error(`first chunk ${c.type}`);
    return JSON.parse(c.payload.toString());
  }

  send(type, payload = '', fds = null) {
    const data = wire.chunk(type, payload);
    let off = 0;
    while (off < data.length) {
      const n = native.send(this.fd, data.subarray(off), off === 0 ? fds : null);
      if (n < 0) native.poll([this.fd], [4], 1000);
      else off += n;
    }
  }

  // Runs one session: `command` with `args` in `cwd` with `env` (an object); `stdin`
  // relayed (a Buffer), or `fds` ([stdin, stdout, stderr] descriptors of ours) passed.
  // {stdout, stderr, status, taken, notices}.
  session(command, args, { env = {}, cwd = process.cwd(), stdin = Buffer.alloc(0), fds = null, id = 1, umask = '0022' } = {}) {
    const head = [];
    for (const a of args) head.push(wire.chunk('A', a));
    for (const [k, v] of Object.entries(env)) head.push(wire.chunk('E', `${k}=${v}`));
    head.push(wire.chunk('E', `NGW_UMASK=${umask}`), wire.chunk('E', `NGW_SESSION=${id}`));
    if (fds) head.push(wire.chunk('E', 'NGW_CLIENT_FDS=0,1,2'));
    head.push(wire.chunk('D', cwd), wire.chunk('C', command));
    const data = Buffer.concat(head);
    let off = 0;
    while (off < data.length) {
      const n = native.send(this.fd, data.subarray(off), off === 0 && fds ? fds : null);
      if (n < 0) native.poll([this.fd], [4], 1000);
      else off += n;
    }
    const out = { stdout: [], stderr: [], status: null, taken: null, notices: [] };
    let sent = 0;
    let ended = false;
    for (;;) {
      const c = this.next();
      if (c.type === '1') out.stdout.push(c.payload);
      else if (c.type === '2') out.stderr.push(c.payload);
      else if (c.type === 't') out.taken = c.payload.toString();
      else if (c.type === 'n') out.notices.push(JSON.parse(c.payload.toString()));
      else if (c.type === 'S') {
        // A window (`S N`) is answered with chunks totalling at most N bytes, a plain `S`
        // with one chunk; `.` once stdin has ended.
        // As ngd does, `.` follows the last data at once when the window is not used up.
        let want = c.payload.length ? Number(c.payload.toString()) : 65536;
        if (ended) continue;
        if (!c.payload.length && sent >= stdin.length) {
          this.send('.');
          ended = true;
          continue;
        }
        while (sent < stdin.length && want > 0) {
          const piece = stdin.subarray(sent, sent + Math.min(want, 65536));
          sent += piece.length;
          want -= piece.length;
          this.send('0', piece);
          if (!c.payload.length) break;
        }
        if (c.payload.length && sent >= stdin.length && want > 0) {
          this.send('.');
          ended = true;
        }
      } else if (c.type === 'X') {
        out.status = c.payload.toString();
        break;
      }
    }
    out.stdout = Buffer.concat(out.stdout).toString();
    out.stderr = Buffer.concat(out.stderr).toString();
    return out;
  }

  quit() {
    this.send('q');
    return native.wait(this.pid, true);
  }
}

// Runs `command args` through driver `d` on pipes of our own, passed as the client's
// descriptors (`opts` as for Driver#session, without `fds`); its result with the
// session's `stdout` and `stderr` read to their end.
function sessionOnPipes(d, command, args, opts, stdin = Buffer.alloc(0)) {
  const [inR, inW] = native.pipe();
  const [outR, outW] = native.pipe();
  const [errR, errW] = native.pipe();
  if (stdin.length) native.write(inW, stdin);
  native.close(inW);
  const out = d.session(command, args, { ...opts, fds: [inR, outW, errW] });
  for (const fd of [inR, outW, errW]) native.close(fd);
  const drain = (fd) => {
    const parts = [];
    for (;;) {
      const b = native.read(fd, 1 << 16);
      if (!b || !b.length) break;
      parts.push(b);
    }
    native.close(fd);
    return Buffer.concat(parts).toString();
  };
  out.stdout = drain(outR);
  out.stderr = drain(errR);
  return out;
}

module.exports = { Driver, FIXTURE, native, sessionOnPipes };
