'use strict';
// What preloading records of process.argv (lib/argv.js), and which sessions' arguments
// give the same answers.
const test = require('node:test');
const assert = require('node:assert');
const argv = require('../lib/argv');

// has-flag, as supports-color calls it while it loads.
function hasFlag(flag, args) {
  const position = args.indexOf(`--${flag}`);
  const terminator = args.indexOf('--');
  return position !== -1 && (terminator === -1 || position < terminator);
}

test('a flag looked for is an answer: another file keeps the spare, the flag does not', () => {
  const real = ['/usr/bin/node', '/p/eslint', 'a.js'];
  const r = argv.record(real, () => assert.fail('no write'));
  assert.strictEqual(hasFlag('color', r.proxy), false);
  assert.strictEqual(r.proxy[1], '/p/eslint');
  const reads = r.end();
  assert.strictEqual(argv.diff(reads, ['/usr/bin/node', '/p/eslint', 'b.js', 'c.js']), null);
  assert.notStrictEqual(argv.diff(reads, ['/usr/bin/node', '/p/eslint', '--color', 'a.js']), null);
  assert.notStrictEqual(argv.diff(reads, ['/usr/bin/node', '/q/eslint', 'a.js']), null);
});

test('reading the arguments themselves ties the spare to them', () => {
  const real = ['/usr/bin/node', '/p/x', '-v', 'a'];
  const r = argv.record(real, () => {});
  const rest = r.proxy.slice(2);
  assert.deepStrictEqual(rest, ['-v', 'a']);
  const reads = r.end();
  assert.strictEqual(argv.diff(reads, ['/usr/bin/node', '/p/x', '-v', 'a']), null);
  assert.notStrictEqual(argv.diff(reads, ['/usr/bin/node', '/p/x', '-v', 'b']), null);
  assert.notStrictEqual(argv.diff(reads, ['/usr/bin/node', '/p/x', '-v', 'a', 'c']), null);
  const it = argv.record(real, () => {});
  assert.deepStrictEqual([...it.proxy], real);
  assert.notStrictEqual(argv.diff(it.end(), ['/usr/bin/node', '/p/x', '-v']), null);
});

test('a write is reported, and nothing is recorded once preloading ended', () => {
  const real = ['/usr/bin/node', '/p/x'];
  let writes = 0;
  const r = argv.record(real, () => writes++);
  r.proxy.push('--flag');
  assert.ok(writes > 0);
  const reads = r.end();
  const n = reads.length;
  const after = writes;
  r.proxy.indexOf('--flag');
  r.proxy.push('more');
  assert.strictEqual(writes, after);
  assert.strictEqual(r.end().length, n);
});

test('a spare that reported nothing is taken by no session', () => {
  assert.notStrictEqual(argv.diff([['all', null]], ['/usr/bin/node', '/p/x']), null);
  assert.strictEqual(argv.diff([], ['/usr/bin/node', '/p/x', 'anything']), null);
});
