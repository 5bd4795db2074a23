'use strict';
// The end of a warm session (lib/ending.js), against a real ngw-node and cold `node`, byte
// for byte: where the exit status goes at the 'exit' event, before Node's teardown (the
// `status-at-exit` count notice), and where it waits for the process's end as cold: V8
// coverage (whose file must exist once the status is in), a worker thread, a native addon,
// an uncaught error; such sessions still make the code cache. Also: preloaded modules,
// compiled eagerly, are taken from the code cache once a session has made it (no
// `code-cache-rejected` from then on).
const test = require('node:test');
const assert = require('node:assert');
const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawnSync } = require('child_process');
const { Driver, sessionOnPipes } = require('./driver');

const ENV = { PATH: `${path.dirname(process.execPath)}:${process.env.PATH || '/usr/bin:/bin'}`, HOME: os.homedir(), LANG: 'C.UTF-8' };

const root = fs.mkdtempSync(path.join(os.tmpdir(), 'ngw-node-ending-'));
const state = path.join(root, 'state');
const MAIN = path.join(root, 'main.js');
const ADDON = path.join(root, 'addon.node');

fs.writeFileSync(path.join(root, 'lib.js'), "'use strict';\nexports.twice = (x) => x * 2;\nexports.later = (f) => setTimeout(f, 5);\n");
fs.writeFileSync(MAIN, [
  "'use strict';",
  "const lib = require('./lib.js');",
  'const what = process.argv[2];',
  "console.log('main', what, lib.twice(21));",
  "if (what === 'exit-later') lib.later(() => process.exit(3));",
  "else if (what === 'exit-code') process.exitCode = 4;",
  "else if (what === 'listener') process.on('exit', (c) => console.log('exit listener', c));",
  "else if (what === 'uncaught') lib.later(() => { throw new Error('uncaught here'); });",
  "else if (what === 'worker') {",
  "  const { Worker } = require('worker_threads');",
  "  new Worker('setInterval(() => {}, 1000)', { eval: true }).unref();",
  "} else if (what === 'addon') {",
  '  require(process.env.ADDON);',
  '}',
  '',
].join('\n'));
fs.copyFileSync(process.env.NGW_NODE_NATIVE, ADDON);

function cold(args, env) {
  const r = spawnSync(process.execPath, [MAIN, ...args], { env: { ...ENV, ...env }, cwd: root });
  const status = r.status !== null ? `${r.status}\n` : `${128 + os.constants.signals[r.signal]} ${r.signal}\n`;
  return { stdout: r.stdout.toString(), stderr: r.stderr.toString(), status };
}

const counted = (out, what) => out.notices.some((n) => n.kind === 'count' && n.message === what);
const warm = (out) => !out.notices.some((n) => n.kind === 'fallback');

// Runs `args` warm (after as many sessions as the spare needs) and cold, byte for byte the
// same; the warm run's result, with `check(out)` run on each warm session as it ends.
function served(d, args, ids, { env = {}, check = () => {} } = {}) {
  for (let i = 0; i < 6; i++) {
    const out = sessionOnPipes(d, 'prog', args, { env: { ...ENV, ...env }, cwd: root, id: ids.next++ });
    check(out);
    const want = cold(args, env);
    for (const k of ['stdout', 'stderr', 'status']) assert.strictEqual(out[k], want[k], `${args}: ${k}`);
    if (warm(out) && out.taken !== null) return out;
  }
  assert.fail(`${args}: no session was served by a spare`);
}

test('the status goes at the exit event where nothing after it can be seen', () => {
  const d = new Driver(['--state-dir', state, `prog=${MAIN}`]);
  d.hello();
  const ids = { next: 1 };
  for (const args of [['plain'], ['exit-later'], ['exit-code'], ['listener']]) {
    const out = served(d, args, ids);
    assert.ok(counted(out, 'status-at-exit'), `${args}: the status waited for the process`);
  }
  d.quit();
});

test('the status waits for the process where its end can be seen', () => {
  const log = path.join(root, 'held.log');
  const d = new Driver(['--state-dir', state, `prog=${MAIN}`], { log });
  d.hello();
  const ids = { next: 100 };
  const coverage = path.join(root, 'coverage');
  const cases = [
    [['uncaught'], {}, null],
    [['worker'], {}, 'a worker thread was started'],
    [['addon'], { ADDON }, 'a native addon is loaded'],
    [['plain'], { NODE_OPTIONS: `--diagnostic-dir=${root}` }, 'node option --diagnostic-dir'],
  ];
  for (const [args, env, why] of cases) {
    const out = served(d, args, ids, { env });
    assert.ok(!counted(out, 'status-at-exit'), `${args}: the status went before the process ended`);
    if (why !== null) assert.match(fs.readFileSync(log, 'utf8'), new RegExp(`waits for the process to end \\(${why}\\)`));
  }
  // V8's coverage is written as the process ends: there once the status is in, as cold.
  const check = (out) => {
    const files = fs.existsSync(coverage) ? fs.readdirSync(coverage) : [];
    assert.ok(files.length > 0, `no coverage when the status came (${out.status.trim()})`);
    fs.rmSync(coverage, { recursive: true, force: true });
  };
  const out = served(d, ['plain'], ids, { env: { NODE_V8_COVERAGE: coverage }, check });
  assert.ok(!counted(out, 'status-at-exit'));
  d.quit();
});

test('preloaded modules compiled eagerly come from the code cache a session made', () => {
  const d = new Driver(['--state-dir', path.join(root, 'state-cache'), `prog=${MAIN}`]);
  d.hello();
  const ids = { next: 200 };
  let hits = 0;
  for (let i = 0; i < 8 && hits < 2; i++) {
    const out = served(d, ['plain'], ids);
    if (counted(out, 'code-cache-hit')) {
      assert.ok(!counted(out, 'code-cache-rejected'), 'V8 rejected a cache made by a session');
      hits += 1;
    }
  }
  assert.strictEqual(hits, 2, 'no two sessions were served from the code cache');
  d.quit();
});

test('a session whose status waits for the process still makes the code cache', () => {
  const d = new Driver(['--state-dir', path.join(root, 'state-held'), `prog=${MAIN}`]);
  d.hello();
  const ids = { next: 300 };
  let hit = false;
  for (let i = 0; i < 8 && !hit; i++) {
    const out = served(d, ['addon'], ids, { env: { ADDON } });
    assert.ok(!counted(out, 'status-at-exit'), 'the status went before the process ended');
    hit = counted(out, 'code-cache-hit');
  }
  assert.ok(hit, 'no session was served from a code cache its sessions made');
  d.quit();
});

test.after(() => fs.rmSync(root, { recursive: true, force: true }));
