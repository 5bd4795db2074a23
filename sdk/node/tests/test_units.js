'use strict';
// The worker's pure parts: chunk framing, header decoding, descriptor maps, session keys.
const test = require('node:test');
const assert = require('node:assert');
const wire = require('../lib/wire');
const { decode, fdList } = require('../lib/worker');
const state = require('../lib/state');

test('chunks are cut at their boundaries and an oversized one is refused', () => {
  const buf = Buffer.concat([wire.chunk('A', 'one'), wire.chunk('C', 'cmd'), wire.chunk('1', 'par')]);
  const [chunks, rest] = wire.split(buf.subarray(0, buf.length - 1));
  assert.deepStrictEqual(chunks.map((c) => [c.type, c.payload.toString()]), [['A', 'one'], ['C', 'cmd']]);
  assert.strictEqual(rest.length, 5 + 3 - 1);
  const big = Buffer.alloc(5);
  big.writeUInt32BE(wire.MAX_CHUNK + 1, 0);
  big.write('0', 4);
  assert.throws(() => wire.split(big), wire.TooLarge);
});

test('a header becomes the command environment and the metadata', () => {
  const s = decode({
    args: [Buffer.from('--fix')],
    env: ['A=1', 'NGW_UMASK=0027', 'NGW_SESSION=9', 'NAILGUN_TTY_0=1', 'A=2', 'bad', '=x', 'B=', 'NGW_SIGIGN=SIGHUP,SIGINT'].map((e) => Buffer.from(e)),
    dir: Buffer.from('/tmp'),
    command: Buffer.from('eslint'),
    fds: [],
  });
  assert.deepStrictEqual([...s.env], [['A', '2'], ['B', '']]);
  assert.strictEqual(s.umask, 0o027);
  assert.strictEqual(s.id, '9');
  assert.deepStrictEqual(s.ignore, [1, 2]);
  assert.strictEqual(s.utf8, true);
  const latin = decode({ args: [Buffer.from([0xff])], env: [], dir: null, command: Buffer.from('x'), fds: [] });
  assert.strictEqual(latin.utf8, false);
});

test('descriptor maps are strictly increasing fds among 0-2', () => {
  assert.deepStrictEqual(fdList('0,1,2'), [0, 1, 2]);
  assert.deepStrictEqual(fdList('1,2'), [1, 2]);
  assert.deepStrictEqual(fdList('2,1'), []);
  assert.deepStrictEqual(fdList('0,3'), []);
  assert.deepStrictEqual(fdList(undefined), []);
});

test("a key differs in the start-up variables, the variables a preload read, the directory and the stdio asked about", () => {
  const env = (o) => new Map(Object.entries(o));
  const a = state.key('/usr/bin/node', '/p', ['tty', 'tty', 'tty'], env({ NODE_OPTIONS: '', TERM: 'xterm', X: '1' }));
  const same = state.key('/usr/bin/node', '/p', ['tty', 'tty', 'tty'], env({ NODE_OPTIONS: '', TERM: 'xterm', X: '2' }));
  assert.strictEqual(state.keyDiff(a, same, [], false), null);
  assert.match(state.keyDiff(a, same, ['X'], false), /X differs/);
  const opts = state.key('/usr/bin/node', '/p', ['tty', 'tty', 'tty'], env({ NODE_OPTIONS: '--max-old-space-size=64', TERM: 'xterm', X: '1' }));
  assert.match(state.keyDiff(a, opts, [], false), /NODE_OPTIONS differs/);
  const pipe = state.key('/usr/bin/node', '/p', ['fifo', 'tty', 'tty'], a.env);
  // The stdio kinds count only when a preloaded module asked what a stream is.
  assert.strictEqual(state.keyDiff(a, pipe, [], false), null);
  assert.match(state.keyDiff(a, pipe, [], false, [1]), /stdio is fifo/);
  const dir = state.key('/usr/bin/node', '/q', ['tty', 'tty', 'tty'], a.env);
  assert.match(state.keyDiff(a, dir, [], false), /directory/);
  const more = state.key('/usr/bin/node', '/p', ['tty', 'tty', 'tty'], env({ NODE_OPTIONS: '', TERM: 'xterm', X: '1', Y: '' }));
  assert.strictEqual(state.keyDiff(a, more, [], false), null);
  assert.match(state.keyDiff(a, more, [], true), /names differ/);
});

test('a changed file is seen', () => {
  const fs = require('fs');
  const os = require('os');
  const path = require('path');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ngw-node-test-'));
  const f = path.join(dir, 'm.js');
  fs.writeFileSync(f, '1');
  const native = require('../lib/native').load();
  const fp = state.fingerprint(native, [f, path.join(dir, 'absent')]);
  assert.strictEqual(state.changedFile(native, fp), null);
  fs.writeFileSync(f, '22');
  assert.strictEqual(state.changedFile(native, fp), f);
  fs.rmSync(dir, { recursive: true });
});

test("a script's #! line decides which node runs it, as what, with which options", () => {
  const sb = (text) => state.shebang(Buffer.from(text));
  assert.deepStrictEqual(sb('#!/usr/bin/env node\nx'), { node: null, argv0: 'node', options: [] });
  assert.deepStrictEqual(sb('#!/usr/bin/node\n'), { node: '/usr/bin/node', argv0: '/usr/bin/node', options: [] });
  assert.deepStrictEqual(sb('#!/usr/bin/env -S node --no-warnings\n'), { node: null, argv0: 'node', options: ['--no-warnings'] });
  assert.deepStrictEqual(sb("'use strict';\n"), { node: null, argv0: 'node', options: [] });
  assert.match(sb('#!/usr/bin/env node --no-warnings\n').error, /without -S/);
  assert.match(sb('#!/usr/bin/env python3\n').error, /not node/);
  assert.match(sb('#!/usr/bin/env -S node -e 1\n').error, /gives node -e/);
  assert.match(sb('#!/usr/bin/env -S node --eval=1\n').error, /--eval/);
});
