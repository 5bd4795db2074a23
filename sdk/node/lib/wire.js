'use strict';
// The ngw wire format (docs/ngw.md section 2): Nailgun chunks, a 4-byte big-endian payload
// length and a type byte, then the payload.

// The largest payload the worker accepts (announced in the hello as max_chunk).
const MAX_CHUNK = 16 * 1024 * 1024;
// The largest output chunk the worker sends.
const OUT_CHUNK = 64 * 1024;

class TooLarge extends Error {}

// One chunk of type `type` (one character) carrying `payload` (a Buffer or a string).
function chunk(type, payload = '') {
  const body = Buffer.isBuffer(payload) ? payload : Buffer.from(payload, 'utf8');
  const head = Buffer.alloc(5);
  head.writeUInt32BE(body.length, 0);
  head.write(type, 4, 'latin1');
  return Buffer.concat([head, body]);
}

// Cuts complete chunks off the front of `buf`: `[chunks, rest]`, each chunk
// `{type, payload, offset}` with its offset in `buf`. Throws TooLarge for a length over
// MAX_CHUNK, as soon as its header is there.
function split(buf) {
  const chunks = [];
  let off = 0;
  while (buf.length - off >= 5) {
    const len = buf.readUInt32BE(off);
    if (len > MAX_CHUNK) throw new TooLarge(`chunk of ${len} bytes over the cap of ${MAX_CHUNK}`);
    if (buf.length - off - 5 < len) break;
    chunks.push({
      type: String.fromCharCode(buf[off + 4]),
      payload: buf.subarray(off + 5, off + 5 + len),
      offset: off,
    });
    off += 5 + len;
  }
  return [chunks, buf.subarray(off)];
}

module.exports = { MAX_CHUNK, OUT_CHUNK, TooLarge, chunk, split };
