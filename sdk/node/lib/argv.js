'use strict';
// What the modules a spare preloads read of `process.argv`, and whether a session's argv
// gives them the same answers.
//
// A library may read the command line as it loads: `supports-color` looks for `--color`
// and `--no-color` at its top level, so a spare that preloaded it with other arguments
// would colour differently from a cold run. While a spare preloads, `process.argv` is a
// proxy over the real array (holding the argv of the session before, the best guess for
// the next) that records each answer it gives: an element, the length, `in`, and the
// results of `indexOf`, `lastIndexOf` and `includes` (which has-flag and its kind call, so
// that an absent flag does not tie the spare to every other argument). Methods such as
// `slice` or iteration read through the proxy, element by element. A session takes the
// spare only if its own argv gives every recorded answer (`diff`); a module that writes
// to argv while it loads stops preloading before it.

const SEARCHES = new Set(['indexOf', 'lastIndexOf', 'includes']);

// Starts recording reads of `real` (process.argv). Returns {proxy, end}: end() stops
// recording and returns the answers, each an array as `diff` reads it.
function record(real, onWrite) {
  const seen = new Map();
  let active = true;
  const note = (obs) => {
    if (active) seen.set(JSON.stringify(obs), obs);
  };
  const searches = {};
  for (const m of SEARCHES) {
    searches[m] = function (...args) {
      const r = Array.prototype[m].apply(real, args);
      if (args.every((a) => typeof a === 'string' || typeof a === 'number')) note([m, args, r]);
      else note(['all', real.slice()]);
      return r;
    };
  }
  const proxy = new Proxy(real, {
    get(t, k, receiver) {
      if (k === 'length') note(['length', t.length]);
      else if (typeof k === 'string' && /^(0|[1-9][0-9]*)$/.test(k)) {
        const i = Number(k);
        note(i < t.length ? ['at', i, t[i]] : ['length', t.length]);
      } else if (active && typeof k === 'string' && SEARCHES.has(k) && t[k] === Array.prototype[k]) return searches[k];
      return Reflect.get(t, k, receiver);
    },
    has(t, k) {
      const r = Reflect.has(t, k);
      if (typeof k === 'string') note(['has', k, r]);
      return r;
    },
    ownKeys(t) {
      note(['all', t.slice()]);
      return Reflect.ownKeys(t);
    },
    set(t, k, v, receiver) {
      if (active) onWrite();
      return Reflect.set(t, k, v, receiver);
    },
    deleteProperty(t, k) {
      if (active) onWrite();
      return Reflect.deleteProperty(t, k);
    },
    defineProperty(t, k, d) {
      if (active) onWrite();
      return Reflect.defineProperty(t, k, d);
    },
  });
  return {
    proxy,
    end() {
      active = false;
      return [...seen.values()];
    },
  };
}

// Why a session whose program sees `argv` cannot take a spare whose preloading got the
// answers `reads`, or null.
function diff(reads, argv) {
  for (const obs of reads || []) {
    const [kind, a, b] = obs;
    let same;
    if (kind === 'length') same = argv.length === a;
    else if (kind === 'at') same = a < argv.length && argv[a] === b;
    else if (kind === 'has') same = (a in argv) === b;
    else if (SEARCHES.has(kind)) same = Array.isArray(a) && Array.prototype[kind].apply(argv, a) === b;
    else if (kind === 'all') same = Array.isArray(a) && a.length === argv.length && a.every((x, i) => x === argv[i]);
    else same = false;
    if (!same) return 'a preloaded module read the arguments, and they differ from the spare\'s';
  }
  return null;
}

module.exports = { record, diff };
