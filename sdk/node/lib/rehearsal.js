'use strict';
// The spare's rehearsal (docs/ngw-node.md, "The rehearsal"): before it waits for its
// session, a spare runs once, on objects of its own, the code nearly every program runs
// first: `console.log` and `console.error` with format strings, objects, arrays and
// errors (Node's `Console`, `util.format` and `util.inspect`), and writes through a
// `Writable`, the class under every standard stream. V8 compiles a function at its first
// call and fills its inline caches as it runs; in a spare that has only loaded modules,
// a session's first `console.log` paid that (2-4 ms). The program's own code is never
// rehearsed: a spare cannot fork, so what a program's run left in its modules' closures
// could not be put back.
//
// Nothing the session can see changes: the rehearsal's console and stream are its own and
// are dropped; the stream's writes never complete, so it schedules no tick and takes no
// async id (a completed write would queue an `afterWrite` tick, an id the program's own
// resources would then not get); it makes no handle, timer or promise, reads no variable
// a preloaded module did not, and leaves `util.inspect.defaultOptions`, the global
// `console` and the standard streams alone. What stays is what V8 compiled and the
// builtin modules it loaded (`stream`, `console`), as a preload's do.

const util = require('util');

// In the worker: whether spares rehearse (NGW_NODE_REHEARSE=0 in its environment turns it
// off, to measure it).
const REHEARSE = process.env.NGW_NODE_REHEARSE !== '0';

// In the spare, once it has preloaded: rehearses; how long it took, in ms, or null (not
// asked, or it failed: under options that change Node's builtins, say; the spare then
// serves without it).
function rehearse(config) {
  if (!config.rehearse) return null;
  try {
    return run();
  } catch {
    return null;
  }
}

function run() {
  const t0 = process.hrtime.bigint();
  const { Writable } = require('stream');
  const { Console } = require('console');
  const sink = new Writable({
    decodeStrings: false,
    write() {
      // never completes: later writes queue behind it
    },
  });
  // Without colours: deciding them for a stream loads Node's util/colors, which opens the
  // real stderr as it loads (the session's first console call does that itself).
  const c = new Console({ stdout: sink, stderr: sink, colorMode: false });
  const obj = { name: 'rehearsal', n: 1, list: [1, 'two', { three: 3 }], nested: { a: { b: { c: null } } }, when: new Date(0) };
  const err = new Error('rehearsal');
  for (let i = 0; i < 3; i++) {
    c.log('%s: %d of %i (%j)', 'line', i, 3, { i });
    c.log(obj, [1, 2, 3], 'text', 42, true, undefined, null);
    c.log('%o %O %%', obj, new Map([[1, 2]]));
    c.error('warning:', err.message, new Set(['a']));
    c.info(util.format('%s=%s', 'key', i));
    c.table([{ a: 1, b: 'x' }]);
    sink.write(`${'-'.repeat(i + 1)}\n`);
    sink.write(Buffer.from('bytes\n'));
    util.inspect(obj, { depth: 4, colors: false, compact: 3, breakLength: 80 });
    util.inspect('string', { colors: false });
  }
  return Number(process.hrtime.bigint() - t0) / 1e6;
}

module.exports = { REHEARSE, rehearse };
