'use strict';
// ES modules in spares, with a real ngw-node against the driver: an entry of ours
// (fixtures/esm/main.cjs) that imports ES modules as prettier's bin does, each session
// compared byte for byte with a cold `node main.cjs CASE`; the worker's log says when a
// spare that took a session had preloaded ES modules, and where preloading stopped.
const test = require('node:test');
const assert = require('node:assert');
const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawnSync } = require('child_process');
const { Driver, native, sessionOnPipes } = require('./driver');
const esm = require('../lib/esm');

const ENV = { PATH: `${path.dirname(process.execPath)}:${process.env.PATH || '/usr/bin:/bin'}`, HOME: os.homedir(), LANG: 'C.UTF-8' };
const FIXTURES = path.join(__dirname, 'fixtures', 'esm');
const PRELOADED = /warm, handed over in [0-9.]+ ms, (\d+) ES module\(s\) preloaded/g;

// A copy of the fixtures, a state directory and the worker's log, for one test.
function project() {
  const dir = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'ngw-node-esm-')));
  for (const f of fs.readdirSync(FIXTURES)) fs.copyFileSync(path.join(FIXTURES, f), path.join(dir, f));
  fs.mkdirSync(path.join(dir, '.state'));
  return { dir, main: path.join(dir, 'main.cjs'), state: path.join(dir, '.state'), log: path.join(dir, '.log') };
}

function cold(p, args) {
  const r = spawnSync(process.execPath, [p.main, ...args], { env: ENV, cwd: p.dir });
  return { stdout: r.stdout.toString(), stderr: r.stderr.toString(), status: `${r.status}\n` };
}

function onPipes(d, p, args, id) {
  return sessionOnPipes(d, 'main', args, { env: ENV, cwd: p.dir, id });
}

// Runs `args` through the worker, each session as cold, until a spare with ES modules
// preloaded served one (at most eight sessions); the sessions' notices.
function untilPreloaded(d, p, args, ids) {
  const notices = [];
  for (let i = 0; i < 8; i++) {
    const want = cold(p, args);
    const before = [...fs.readFileSync(p.log, 'utf8').matchAll(PRELOADED)].length;
    const out = onPipes(d, p, args, ids.next++);
    assert.strictEqual(out.stdout, want.stdout, `${args}: stdout`);
    assert.strictEqual(out.stderr, want.stderr, `${args}: stderr`);
    assert.strictEqual(out.status, want.status, `${args}: status`);
    notices.push(...out.notices);
    const found = [...fs.readFileSync(p.log, 'utf8').matchAll(PRELOADED)];
    if (found.length > before && out.notices.length === 0) return { notices, preloaded: Number(found[found.length - 1][1]) };
    // the next spare starts beside the session: let it get ready
    native.poll([], [], 300);
  }
  assert.fail(`never served by a spare with ES modules preloaded:\n${fs.readFileSync(p.log, 'utf8')}`);
}

const learned = (p) => JSON.parse(fs.readFileSync(path.join(p.state, 'test.json'), 'utf8'))[p.main];

test('ES modules imported from CommonJS are learned and preloaded, and run as cold', { skip: !esm.supported() && 'no require(esm) in this Node' }, () => {
  const p = project();
  fs.writeFileSync(p.log, '');
  const d = new Driver(['--state-dir', p.state, `main=${p.main}`], { log: p.log });
  d.hello();
  const ids = { next: 1 };
  const { preloaded } = untilPreloaded(d, p, ['plain'], ids);
  assert.strictEqual(preloaded, 2);
  assert.deepStrictEqual(learned(p).esm, [path.join(p.dir, 'lib.mjs'), path.join(p.dir, 'dep.mjs')]);
  // Once more warm, preloaded, as cold.
  untilPreloaded(d, p, ['plain'], ids);

  // A changed ES module runs its new code: the spare that loaded the old one is stale.
  native.poll([], [], 300);
  fs.writeFileSync(path.join(p.dir, 'dep.mjs'), "(globalThis.order ??= []).push('dep');\nexport const dep = 'from the new dep';\n");
  const want = cold(p, ['plain']);
  assert.match(want.stdout, /hello from the new dep/);
  const out = onPipes(d, p, ['plain'], ids.next++);
  assert.deepStrictEqual([out.stdout, out.stderr, out.status], [want.stdout, want.stderr, want.status]);
  assert.match(out.notices.map((n) => n.message).join('\n'), /dep\.mjs changed since the spare loaded it; ran cold/);
  untilPreloaded(d, p, ['plain'], ids);
  d.quit();
  fs.rmSync(p.dir, { recursive: true, force: true });
});

test('an ES module that writes to stdout as it loads is not preloaded, and recorded; output as cold', { skip: !esm.supported() && 'no require(esm) in this Node' }, () => {
  const p = project();
  fs.writeFileSync(p.log, '');
  const d = new Driver(['--state-dir', p.state, `main=${p.main}`], { log: p.log });
  d.hello();
  const ids = { next: 1 };
  const { preloaded } = untilPreloaded(d, p, ['loud'], ids);
  // The spares stop before it: the modules before it are preloaded, not it.
  assert.strictEqual(preloaded, 2);
  const log = fs.readFileSync(p.log, 'utf8');
  const stopped = log.split('\n').find((l) => l.includes(`preloading ${path.join(p.dir, 'loud.mjs')}`));
  assert.ok(stopped, log);
  assert.match(stopped, /touched stdout\.write; the next spares stop before it/);
  assert.strictEqual(learned(p).stop, path.join(p.dir, 'loud.mjs'));
  untilPreloaded(d, p, ['loud'], ids);
  d.quit();
  fs.rmSync(p.dir, { recursive: true, force: true });
});

test('an ES module with a top-level await is not preloaded; output as cold', { skip: !esm.supported() && 'no require(esm) in this Node' }, () => {
  const p = project();
  fs.writeFileSync(p.log, '');
  const d = new Driver(['--state-dir', p.state, `main=${p.main}`], { log: p.log });
  d.hello();
  const ids = { next: 1 };
  untilPreloaded(d, p, ['tla'], ids);
  const { preloaded } = untilPreloaded(d, p, ['tla'], ids);
  assert.strictEqual(preloaded, 2);
  // V8 may have let go of its script by the exit (then it is not learned); if it was
  // learned, require(esm) refused it before it ran, and the spares stop before it.
  const l = learned(p);
  const tla = path.join(p.dir, 'tla.mjs');
  if (l.esm.includes(tla)) assert.strictEqual(l.stop, tla);
  d.quit();
  fs.rmSync(p.dir, { recursive: true, force: true });
});

test('what a spare is told: the ES modules cut before the stop, a learning run while none were learned and every RELEARN-th run', () => {
  const saved = [];
  const learned = { scripts: {}, save: () => saved.push(1) };
  assert.deepStrictEqual(esm.forSpare(learned, '/s', true), { esm: [], learnEsm: true, eager: true });
  assert.deepStrictEqual(esm.forSpare(learned, '/s', false), { esm: [], learnEsm: false, eager: true });
  learned.scripts['/s'] = { modules: ['/c.js'] };
  assert.strictEqual(esm.record(learned, '/s', ['/a.mjs', '/s', '/b.mjs', '/c.mjs'], ['/s']), 3);
  assert.deepStrictEqual(esm.forSpare(learned, '/s', true), { esm: ['/a.mjs', '/b.mjs', '/c.mjs'], learnEsm: false, eager: true });
  learned.scripts['/s'].stop = '/b.mjs';
  assert.deepStrictEqual(esm.forSpare(learned, '/s', true).esm, ['/a.mjs']);
  // A CommonJS module that is the program comes before every ES module.
  learned.scripts['/s'].stop = '/c.js';
  assert.deepStrictEqual(esm.forSpare(learned, '/s', true).esm, []);
  for (let i = 0; i < esm.RELEARN; i++) {
    assert.strictEqual(esm.forSpare(learned, '/s', true).learnEsm, false);
    assert.strictEqual(esm.record(learned, '/s', undefined, []), null);
  }
  assert.strictEqual(esm.forSpare(learned, '/s', true).learnEsm, true);
  assert.strictEqual(saved.length, esm.RELEARN + 1);
});

test('an ES module file by its name: .mjs, or .js in a package of "type": "module"', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ngw-node-type-'));
  fs.mkdirSync(path.join(dir, 'm', 'lib'), { recursive: true });
  fs.mkdirSync(path.join(dir, 'c'));
  fs.writeFileSync(path.join(dir, 'm', 'package.json'), '{"type":"module"}');
  fs.writeFileSync(path.join(dir, 'c', 'package.json'), '{"type":"commonjs"}');
  assert.strictEqual(esm.isModuleFile(path.join(dir, 'c', 'x.mjs')), true);
  assert.strictEqual(esm.isModuleFile(path.join(dir, 'm', 'lib', 'x.js')), true);
  assert.strictEqual(esm.isModuleFile(path.join(dir, 'c', 'x.js')), false);
  assert.strictEqual(esm.isModuleFile(path.join(dir, 'm', 'x.cjs')), false);
  fs.rmSync(dir, { recursive: true, force: true });
});
