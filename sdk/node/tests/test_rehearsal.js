'use strict';
// The spare's rehearsal (lib/rehearsal.js), against a real ngw-node and cold `node`, byte
// for byte, each warm run served by a spare the worker's log says rehearsed: the async ids
// and resources the program's own work gets, the first console output's state
// (`util.inspect.defaultOptions`, the global console), timers and the exit status.
// The rehearsal itself, run in a process of its own, makes no async resource and opens no
// standard stream.
const test = require('node:test');
const assert = require('node:assert');
const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawnSync } = require('child_process');
const { Driver, FIXTURE, sessionOnPipes } = require('./driver');

const ENV = { PATH: `${path.dirname(process.execPath)}:${process.env.PATH || '/usr/bin:/bin'}`, HOME: os.homedir(), LANG: 'C.UTF-8' };
const root = fs.mkdtempSync(path.join(os.tmpdir(), 'ngw-node-rehearsal-'));

function cold(args) {
  const r = spawnSync(process.execPath, [FIXTURE, ...args], { env: ENV, cwd: os.tmpdir() });
  return { stdout: r.stdout.toString(), stderr: r.stderr.toString(), status: `${r.status}\n` };
}

test('sessions served by a rehearsed spare are byte for byte as cold', () => {
  const log = path.join(root, 'worker.log');
  const d = new Driver(['--state-dir', path.join(root, 'state'), `exact=${FIXTURE}`], { log });
  d.hello();
  let id = 1;
  for (const args of [['async'], ['timer'], ['exit-code'], ['async']]) {
    let served = false;
    for (let i = 0; i < 4 && !served; i++) {
      const n = id++;
      const out = sessionOnPipes(d, 'exact', args, { env: ENV, cwd: os.tmpdir(), id: n });
      const want = cold(args);
      for (const k of ['stdout', 'stderr', 'status']) assert.strictEqual(out[k], want[k], `${args}: ${k}`);
      served = new RegExp(`session ${n}: warm, handed over in [0-9.]+ ms, rehearsed \\(`).test(fs.readFileSync(log, 'utf8'));
    }
    assert.ok(served, `${args}: no session was served by a rehearsed spare`);
  }
  d.quit();
});

test('the rehearsal makes no async resource and opens no standard stream', () => {
  const probe = [
    "const ah = require('async_hooks');",
    'const inits = [];',
    'ah.createHook({ init(id, type) { inits.push(type); } }).enable();',
    "const took = require(process.argv[1]).rehearse({ rehearse: true });",
    'ah.createHook({}).disable();',
    "const streams = process.moduleLoadList.filter((m) => /util\\/colors|tty$/.test(m));",
    'process._rawDebug(JSON.stringify({ inits, streams, handles: process._getActiveHandles().length, took: typeof took }));',
  ].join('\n');
  const r = spawnSync(process.execPath, ['-e', probe, path.join(__dirname, '..', 'lib', 'rehearsal.js')], { env: ENV });
  assert.deepStrictEqual(JSON.parse(r.stderr.toString()), { inits: [], streams: [], handles: 0, took: 'number' });
});

test.after(() => fs.rmSync(root, { recursive: true, force: true }));
