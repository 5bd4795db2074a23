'use strict';
// The worker's channel to ngd (NGW_FD): non-blocking reads through the native piece's
// recvmsg, so that the client's descriptors (SCM_RIGHTS) arrive with the header they ride
// on, and an outbound queue written as the socket takes it (the worker never blocks on a
// write, so it always sees an `i`).

const wire = require('./wire');

class Channel {
  constructor(native, fd) {
    this.native = native;
    this.fd = fd;
    this.inbuf = Buffer.alloc(0);
    this.chunks = [];
    this.fds = [];
    this.out = [];
    this.outBytes = 0;
    this.eof = false;
  }

  // Reads what is there into complete chunks (this.chunks) and descriptors (this.fds).
  // Throws wire.TooLarge for an oversized chunk.
  readSome() {
    for (;;) {
      let got;
      try {
        got = this.native.recv(this.fd, 1 << 20, 16);
      } catch (e) {
        if (e.code === 'ECONNRESET') {
          this.eof = true;
          break;
        }
        throw e;
      }
      if (got === null) break;
      for (const fd of got.fds) this.fds.push(fd);
      if (got.data.length === 0) {
        this.eof = true;
        break;
      }
      this.inbuf = this.inbuf.length ? Buffer.concat([this.inbuf, got.data]) : got.data;
      const [chunks, rest] = wire.split(this.inbuf);
      this.inbuf = Buffer.from(rest);
      for (const c of chunks) this.chunks.push({ type: c.type, payload: Buffer.from(c.payload) });
    }
  }

  // The descriptors received so far, taken by the caller.
  takeFds() {
    const fds = this.fds;
    this.fds = [];
    return fds;
  }

  next() {
    return this.chunks.shift();
  }

  send(type, payload = '') {
    const c = wire.chunk(type, payload);
    this.out.push(c);
    this.outBytes += c.length;
    this.flush();
  }

  // Writes what the socket takes now.
  flush() {
    while (this.out.length) {
      let n;
      try {
        n = this.native.send(this.fd, this.out[0], null);
      } catch (e) {
        if (e.code === 'EPIPE' || e.code === 'ECONNRESET') {
          this.eof = true;
          this.out = [];
          this.outBytes = 0;
          return;
        }
        throw e;
      }
      if (n < 0) return;
      this.outBytes -= n;
      if (n === this.out[0].length) this.out.shift();
      else this.out[0] = this.out[0].subarray(n);
    }
  }

  // Blocks until everything queued is written (at exit).
  flushAll() {
    while (this.out.length && !this.eof) {
      this.native.poll([this.fd], [4], 1000);
      this.flush();
    }
  }
}

module.exports = { Channel };
