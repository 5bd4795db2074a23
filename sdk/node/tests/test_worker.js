'use strict';
// A real ngw-node against the driver (ngd's side): each case runs cold (`node exact.js
// CASE`, the same environment and directory) and through the worker, compared byte for
// byte, the worker's run served by a spare (no `fallback` notice) once one is ready.
const test = require('node:test');
const assert = require('node:assert');
const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawnSync } = require('child_process');
const { Driver, FIXTURE, native, sessionOnPipes } = require('./driver');

const ENV = { PATH: `${path.dirname(process.execPath)}:${process.env.PATH || '/usr/bin:/bin'}`, HOME: os.homedir(), LANG: 'C.UTF-8' };

function cold(args, stdin = Buffer.alloc(0)) {
  const r = spawnSync(process.execPath, [FIXTURE, ...args], { env: ENV, cwd: os.tmpdir(), input: stdin });
  const status = r.status !== null ? `${r.status}\n` : `${128 + os.constants.signals[r.signal]} ${r.signal}\n`;
  return { stdout: r.stdout.toString(), stderr: r.stderr.toString(), status };
}

// Runs a session on pipes of our own, passed as the client's descriptors.
function onPipes(d, args, stdin = Buffer.alloc(0), id = 1) {
  return sessionOnPipes(d, 'exact', args, { env: ENV, cwd: os.tmpdir(), id }, stdin);
}

const state = fs.mkdtempSync(path.join(os.tmpdir(), 'ngw-node-state-'));

test('hello names the commands and the features ngd offered', () => {
  const d = new Driver(['--state-dir', state, `exact=${FIXTURE}`], { features: 'fds,notices' });
  const h = d.hello();
  assert.deepStrictEqual(h.commands, ['exact']);
  assert.deepStrictEqual(h.features, ['interrupt', 'fds', 'notices']);
  assert.strictEqual(h.protocol, 1);
  d.quit();
});

test('a missing script is an error hello', () => {
  const d = new Driver(['--state-dir', state, 'x=/nonexistent/x.js']);
  const h = d.hello();
  assert.match(h.error, /no such script/);
  assert.deepStrictEqual(native.wait(d.pid, true), ['exited', 78]);
});

test('sessions on the client descriptors: cold first, then warm, each as `node SCRIPT`', () => {
  const d = new Driver(['--state-dir', state, `exact=${FIXTURE}`]);
  d.hello();
  let id = 1;
  for (const args of [['timer'], ['timer'], ['async'], ['reject'], ['throw'], ['exit-in-callback'], ['exit-code'], ['children'], ['kill'], ['kill', 'SIGTERM']]) {
    // a spare is started beside each session; give it the time to be ready
    const out = onPipes(d, args, Buffer.alloc(0), id++);
    const want = cold(args);
    assert.strictEqual(out.taken, '');
    assert.strictEqual(out.stdout, want.stdout, `${args}: stdout`);
    assert.strictEqual(out.stderr, want.stderr, `${args}: stderr`);
    assert.strictEqual(out.status, want.status, `${args}: status`);
    // (`count` notices say whether V8's code cache served it: lib/codecache.js)
    if (id > 2) assert.deepStrictEqual(out.notices.filter((n) => n.kind !== 'count'), [], `${args} ran cold`);
    else assert.match(out.notices[0].message, /no spare/);
  }
  const big = Buffer.alloc(3 << 20, 7);
  const out = onPipes(d, ['stdin'], Buffer.alloc(0), id++);
  assert.strictEqual(out.stdout, cold(['stdin']).stdout);
  assert.deepStrictEqual(out.notices.filter((n) => n.kind !== 'count'), []);
  const relayed = d.session('exact', ['stdin'], { env: ENV, cwd: os.tmpdir(), stdin: big, id: id++ });
  assert.strictEqual(relayed.stdout, cold(['stdin'], big).stdout);
  assert.strictEqual(relayed.taken, null);
  d.quit();
});

test('a session of another key runs cold and says why', () => {
  const d = new Driver(['--state-dir', state, `exact=${FIXTURE}`]);
  d.hello();
  onPipes(d, ['timer'], Buffer.alloc(0), 1);
  const [inR, inW] = native.pipe();
  const [outR, outW] = native.pipe();
  native.close(inW);
  const other = d.session('exact', ['timer'], { env: { ...ENV, NODE_OPTIONS: '--no-warnings' }, cwd: os.tmpdir(), fds: [inR, outW, outW], id: 2 });
  for (const fd of [inR, outW, outR]) native.close(fd);
  assert.strictEqual(other.status, '0\n');
  assert.match(other.notices[0].message, /NODE_OPTIONS differs from the spare's; ran cold/);
  d.quit();
});

test.after(() => fs.rmSync(state, { recursive: true, force: true }));
