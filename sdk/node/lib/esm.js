'use strict';
// ES modules in spares: which ones a program loaded (learned at the end of a warm run),
// and preloading them in the next spares so that the program's own `import()` of the same
// URL finds them evaluated in Node's ES module cache.
//
// Preloading is synchronous: the spare does its work in Node's `-r` phase, before Node runs
// the main module, with no turn of the event loop, so it cannot wait for `import()`.
// `require()` of an ES module (require(esm), on by default from Node 20.19 and 22.12;
// `process.features.require_module`) loads, links and evaluates the module's whole static
// graph at once, in the order `import` would, and keeps it in the same cache `import()`
// reads. A graph with a top-level `await` is refused before any of it runs
// (ERR_REQUIRE_ASYNC_MODULE): the spare records it as a module that threw, and later
// spares stop before it. Where Node has no require(esm), no ES module is preloaded.
//
// Learning reads, at the program's exit, V8's best-effort coverage through the inspector
// (every script still alive, with its URL, in compile order), keeping the ES module files
// among them: not CommonJS (those are in require.cache), `.mjs`, or `.js` in a package of
// `"type": "module"`. It costs about 12 ms with prettier loaded (Debugger.enable, which
// hashes every script, 55 ms; `module.register` hooks run on another thread on Node 20
// and change how a failed resolution throws), so it runs only in learning runs: while
// nothing was learned for the script, and then every RELEARN-th warm run; and only if the
// run loaded an ES module at all (Node loads its ES module jobs on the first one), so that
// a CommonJS program never pays for it.

const fs = require('fs');
const path = require('path');
const { fileURLToPath } = require('url');

// A learned list is learned again after this many warm runs.
const RELEARN = 10;
// Whether spares compile the preloaded modules' functions ahead (compileEagerly).
const EAGER = process.env.NGW_NODE_LAZY !== '1';

// Whether this Node can preload ES modules (require(esm)).
function supported() {
  return !!(process.features && process.features.require_module);
}

// In the spare: the files to preload, in order: the CommonJS modules, then the ES modules
// where this Node can.
function preloadList(config) {
  const cjs = config.modules || [];
  return supported() && config.esm ? cjs.concat(config.esm) : cjs;
}

// In the spare: while the preloaded modules load, V8 compiles every function of theirs as
// it compiles their scripts (`--no-lazy`), not at its first call, so that the session does
// not; `end()` puts V8's default back before the program runs. Not where the program's
// node options name V8's laziness (they are then the program's, not the default). A module
// compiled from its code cache is compiled with V8's default (`lazily`): V8 accepts a cache
// only under the flags it was made with, the default, and the cache holds the functions
// the run that made it compiled.
function compileEagerly(config) {
  if (!config.eager || programsOwn(/lazy/)) return { lazily: (f) => f(), end() {} };
  const v8 = require('v8');
  v8.setFlagsFromString('--no-lazy');
  let on = true;
  return {
    lazily(f) {
      if (!on) return f();
      v8.setFlagsFromString('--lazy');
      try {
        return f();
      } finally {
        v8.setFlagsFromString('--no-lazy');
      }
    },
    end() {
      on = false;
      v8.setFlagsFromString('--lazy');
    },
  };
}

// In the spare, once it has loaded and compiled all it will before its session: collects
// the garbage of the whole heap, so that the objects the modules made are old by the
// session and its first young-generation collections do not copy them. Not where the
// program's node options name `gc`.
function collectGarbage(config) {
  if (!config.eager || programsOwn(/gc/)) return;
  const v8 = require('v8');
  // `gc` exists only in a context made while the flag is on: one of the spare's own.
  v8.setFlagsFromString('--expose-gc');
  const gc = require('vm').runInNewContext('gc');
  v8.setFlagsFromString('--no-expose-gc');
  gc();
}

// Whether the program's node options (the `#!` line's, NODE_OPTIONS) match `re`.
function programsOwn(re) {
  return [...process.execArgv, ...String(process.env.NODE_OPTIONS || '').split(/\s+/)].some((o) => re.test(o));
}

// In the spare, after preloading: the ES modules' entries in require.cache (require(esm)
// adds one for the file required) are dropped, so that the program's module cache holds
// what an `import()` of them leaves, as cold; the modules stay in the ES module cache.
function forgetWrappers(config) {
  if (!supported()) return;
  for (const f of config.esm || []) delete require.cache[f];
}

// In the spare, as the program exits: {esm: [files]} in a learning run that loaded ES
// modules, {esm: []} in one that loaded none, {} otherwise. `cjs` are the CommonJS
// modules loaded (require.cache's keys), `own` the spare's own files.
function learnAtExit(config, cjs, own) {
  if (!config.learnEsm) return {};
  if (!process.moduleLoadList.includes('NativeModule internal/modules/esm/module_job')) return { esm: [] };
  let inspector;
  try {
    inspector = require('inspector');
  } catch {
    return {};
  }
  const skip = new Set([...cjs, ...own]);
  const scripts = [];
  const session = new inspector.Session();
  try {
    session.connect();
    session.post('Profiler.getBestEffortCoverage', (err, r) => {
      if (!err && r && Array.isArray(r.result)) for (const s of r.result) scripts.push([Number(s.scriptId), s.url]);
    });
  } catch {
    return {};
  } finally {
    try {
      session.disconnect();
    } catch {
      // never connected
    }
  }
  scripts.sort((a, b) => a[0] - b[0]);
  const out = [];
  for (const [, url] of scripts) {
    if (typeof url !== 'string' || !url.startsWith('file:')) continue;
    let file;
    try {
      file = fileURLToPath(url);
    } catch {
      continue;
    }
    if (!skip.has(file) && !out.includes(file) && isModuleFile(file)) out.push(file);
  }
  return { esm: out };
}

// Whether Node loads `file` as an ES module by its name: `.mjs`, or `.js` whose nearest
// package.json says `"type": "module"`.
function isModuleFile(file) {
  if (file.endsWith('.mjs')) return true;
  if (!file.endsWith('.js')) return false;
  let dir = path.dirname(file);
  for (;;) {
    let text = null;
    try {
      text = fs.readFileSync(path.join(dir, 'package.json'), 'utf8');
    } catch {
      // none here
    }
    if (text !== null) {
      try {
        return JSON.parse(text).type === 'module';
      } catch {
        return false;
      }
    }
    const up = path.dirname(dir);
    if (up === dir || path.basename(dir) === 'node_modules') return false;
    dir = up;
  }
}

// In the worker: what a spare for `script` is told, from what `learned` (state.Learned)
// holds: the ES modules to preload (cut before the module preloading stops at) and whether
// its run is a learning run.
function forSpare(learned, script, learn) {
  const s = learned.scripts[script] || {};
  let esm = Array.isArray(s.esm) ? s.esm.filter((m) => typeof m === 'string') : [];
  // Preloading stops before the module that is the program: a CommonJS one comes before
  // every ES module.
  const stop = s.stop ? esm.indexOf(s.stop) : -1;
  if (stop >= 0) esm = esm.slice(0, stop);
  if (s.stop && Array.isArray(s.modules) && s.modules.includes(s.stop)) esm = [];
  const learnEsm = learn && (!Array.isArray(s.esm) || !(s.esmRuns < RELEARN));
  return { esm, learnEsm, eager: EAGER };
}

// In the worker, after a warm run: counts it, and records the ES modules it reported
// (`reported`, or undefined in a run that did not learn), without `exclude` (the entry);
// how many it recorded, or null.
function record(learned, script, reported, exclude) {
  const s = learned.scripts[script];
  if (!s) return null;
  let n = null;
  if (Array.isArray(reported)) {
    s.esm = reported.filter((m) => typeof m === 'string' && !exclude.includes(m));
    s.esmRuns = 0;
    n = s.esm.length;
  } else s.esmRuns = (Number(s.esmRuns) || 0) + 1;
  learned.save();
  return n;
}

// In the worker: what the log says of a spare that took a session.
function preloadedNote(spare) {
  return spare && spare.esmPreloaded ? `, ${spare.esmPreloaded} ES module(s) preloaded` : '';
}

module.exports = { preloadedNote, RELEARN, supported, preloadList, compileEagerly, collectGarbage, forgetWrappers, learnAtExit, isModuleFile, forSpare, record };
