'use strict';
// V8's code cache in spares (lib/codecache.js), against a real ngw-node and cold `node`,
// byte for byte: sessions served with cache hits (the `code-cache-hit` count notice), the
// stack traces of errors thrown from cached modules (while they load, and later), a module
// changed on disk after the spare compiled it ahead, and a cache V8 rejects.
const test = require('node:test');
const assert = require('node:assert');
const fs = require('fs');
const os = require('os');
const path = require('path');
const { spawnSync } = require('child_process');
const { Driver, sessionOnPipes } = require('./driver');

const ENV = { PATH: `${path.dirname(process.execPath)}:${process.env.PATH || '/usr/bin:/bin'}`, HOME: os.homedir(), LANG: 'C.UTF-8' };

const root = fs.mkdtempSync(path.join(os.tmpdir(), 'ngw-node-codecache-'));
const project = path.join(root, 'project');
const state = path.join(root, 'state');
const MAIN = path.join(project, 'main.js');

// main.js: a library (lib.js, preloaded), then modules that write as they load (a spare
// stops preloading before them and compiles them ahead): thrower.js, which throws while it
// loads when asked, and prog.js.
function writeProject(version) {
  fs.mkdirSync(project, { recursive: true });
  fs.writeFileSync(MAIN, [
    "'use strict';",
    "const lib = require('./lib.js');",
    "require('./thrower.js');",
    "require('./prog.js');",
    'const what = process.argv[2];',
    "if (what === 'call') {",
    '  try { lib.boom(); } catch (e) { console.log(e.stack); }',
    '  console.log(lib.add(2, 3), require.main === module, module.filename, __dirname, __filename);',
    "} else if (what === 'import') {",
    "  require('./dyn.js').load().then((m) => console.log('imported', m.default, lib.words));",
    "} else if (what === 'uncaught') {",
    '  lib.boom();',
    '}',
    '',
  ].join('\n'));
  fs.writeFileSync(path.join(project, 'lib.js'), [
    "'use strict';",
    'exports.add = (a, b) => a + b;',
    `exports.words = "typeof import('x') in a string; import(y) in a comment: "; // import('z')`,
    "exports.boom = function boom() { return [1].map(() => { throw new Error('boom from lib'); }); };",
    '',
  ].join('\n'));
  fs.writeFileSync(path.join(project, 'thrower.js'), [
    "'use strict';",
    "process.stdout.write('');",
    "if (process.argv[2] === 'load-throw') throw new RangeError('thrown while loading');",
    'module.exports = 1;',
    '',
  ].join('\n'));
  // A dynamic import in code: the module is compiled by Node.
  fs.writeFileSync(path.join(project, 'dyn.js'), "'use strict';\nexports.load = () => import('./m.mjs');\n");
  fs.writeFileSync(path.join(project, 'm.mjs'), 'export default 42;\n');
  writeProg(version);
}

function writeProg(version) {
  fs.writeFileSync(path.join(project, 'prog.js'), `'use strict';\nconsole.log('prog ${version}', __filename);\n`);
}

function cold(args) {
  const r = spawnSync(process.execPath, [MAIN, ...args], { env: ENV, cwd: project });
  const status = r.status !== null ? `${r.status}\n` : `${128 + os.constants.signals[r.signal]} ${r.signal}\n`;
  return { stdout: r.stdout.toString(), stderr: r.stderr.toString(), status };
}

function onPipes(d, args, id) {
  return sessionOnPipes(d, 'prog', args, { env: ENV, cwd: project, id });
}

const counted = (out, what) => out.notices.some((n) => n.kind === 'count' && n.message === what);

// Runs `args` warm and cold, asserts them byte for byte the same; the warm run's notices.
function same(d, args, id) {
  const out = onPipes(d, args, id);
  const want = cold(args);
  assert.strictEqual(out.stdout, want.stdout, `${args}: stdout`);
  assert.strictEqual(out.stderr, want.stderr, `${args}: stderr`);
  assert.strictEqual(out.status, want.status, `${args}: status`);
  return out;
}

// Runs `args` (each as cold) until two sessions in a row are served by a spare with code
// cache hits: what the worker learns has settled. The last one's output.
function warmWithHit(d, args, ids) {
  let row = 0;
  for (let i = 0; i < 10; i++) {
    const out = same(d, args, ids.next++);
    row = !out.notices.some((n) => n.kind === 'fallback') && counted(out, 'code-cache-hit') ? row + 1 : 0;
    if (row === 2) return out;
  }
  assert.fail(`${args}: no two sessions in a row were served from the code cache`);
}

test('sessions served from the code cache are byte for byte as cold, errors and stack traces too', () => {
  writeProject('v1');
  const d = new Driver(['--state-dir', state, `prog=${MAIN}`]);
  d.hello();
  const ids = { next: 1 };
  warmWithHit(d, ['call'], ids);
  // An error thrown from a cached module while it loads (uncaught: its stack goes through
  // Module._compile and require), and one thrown later from a cached function.
  const loading = warmWithHit(d, ['load-throw'], ids);
  assert.match(loading.stderr, /RangeError: thrown while loading\n {4}at Object.<anonymous> \(.*thrower\.js:3:\d+\)\n {4}at Module\._compile \(node:/);
  assert.match(warmWithHit(d, ['import'], ids).stdout, /imported 42 typeof import/);
  const later = warmWithHit(d, ['uncaught'], ids);
  assert.match(later.stderr, /Error: boom from lib\n {4}at .*lib\.js:4:/);
  d.quit();
});

test('a module changed after the spare compiled it runs its new code', () => {
  writeProject('v1');
  const d = new Driver(['--state-dir', state, `prog=${MAIN}`]);
  d.hello();
  const ids = { next: 100 };
  warmWithHit(d, ['call'], ids);
  // The spare for the next session is ready, prog.js compiled ahead from its cache.
  writeProg('v2, a longer line than before');
  const out = same(d, ['call'], ids.next++);
  assert.match(out.stdout, /^prog v2, a longer line than before /);
  assert.deepStrictEqual(out.notices.filter((n) => n.kind === 'fallback'), [], 'served by the spare');
  // Same size, new content: the file's times tell.
  writeProg('v3, a longer line than before');
  assert.match(same(d, ['call'], ids.next++).stdout, /^prog v3, /);
  assert.match(warmWithHit(d, ['call'], ids).stdout, /^prog v3, /);
  d.quit();
});

test('a cache V8 rejects is counted, and the module compiled afresh', () => {
  writeProject('v4');
  const d = new Driver(['--state-dir', state, `prog=${MAIN}`]);
  d.hello();
  const ids = { next: 200 };
  warmWithHit(d, ['call'], ids);
  d.quit();
  // Every entry's data made unreadable to V8 (its first bytes), the bundle otherwise intact.
  const dir = path.join(state, 'test.code-cache');
  for (const name of fs.readdirSync(dir)) {
    const file = path.join(dir, name);
    const buf = fs.readFileSync(file);
    const first = buf.indexOf(10);
    const nl = buf.indexOf(10, first + 1);
    const head = JSON.parse(buf.subarray(first + 1, nl).toString());
    let off = nl + 1;
    for (const [, , length] of head.entries) {
      buf.fill(0x5a, off, off + Math.min(16, length));
      off += length;
    }
    fs.writeFileSync(file, buf);
  }
  const again = new Driver(['--state-dir', state, `prog=${MAIN}`]);
  again.hello();
  let rejected = false;
  for (let i = 0; i < 4 && !rejected; i++) rejected = counted(same(again, ['call'], ids.next++), 'code-cache-rejected');
  assert.ok(rejected, 'no session counted a rejected cache');
  warmWithHit(again, ['call'], ids);
  again.quit();
});

test.after(() => fs.rmSync(root, { recursive: true, force: true }));
