'use strict';
// What decides whether a spare can take a session (its *key*), what the worker learns
// about a program between sessions (the modules it loads, where preloading must stop), and
// whether code a spare loaded changed on disk.

const fs = require('fs');
const path = require('path');

// Variables Node or its libraries read while starting, before any module of the program:
// part of every key.
const STARTUP = /^(NODE_|UV_|OPENSSL_|SSL_CERT_|LC_|V8_)/;
const STARTUP_NAMES = new Set(['LANG', 'LANGUAGE', 'TZ', 'TMPDIR', 'HOME']);

function isStartupVar(name) {
  return STARTUP.test(name) || STARTUP_NAMES.has(name);
}

// The file `name` on `pathVar` (a PATH value), or null.
function which(name, pathVar) {
  for (const dir of String(pathVar || '').split(':')) {
    if (!dir) continue;
    const p = path.join(dir, name);
    try {
      fs.accessSync(p, fs.constants.X_OK);
      if (fs.statSync(p).isFile()) return p;
    } catch {
      // not here
    }
  }
  return null;
}

// A session's key: the node binary, the directory, the stdio kinds and the environment.
function key(node, cwd, kinds, env) {
  return { node, cwd, kinds: kinds.join(','), env };
}

// Why a session of key `b` cannot take a spare of key `a` (whose preload read the
// variables `reads`, listed them all if `enumerated`, and asked whether the standard
// streams `stdio` are terminals), or null. The stdio kinds are part of the key only when a
// preloaded module asked: the session's own descriptors replace the spare's before the
// program runs.
function keyDiff(a, b, reads, enumerated, stdio = []) {
  if (a.node !== b.node) return `node is ${b.node} here, ${a.node} in the spare`;
  if (a.cwd !== b.cwd) return "the directory differs from the spare's";
  if (stdio.length && a.kinds !== b.kinds) return `stdio is ${b.kinds}, the spare's ${a.kinds} (a preloaded module asked)`;
  const names = new Set([...reads]);
  for (const k of a.env.keys()) if (isStartupVar(k)) names.add(k);
  for (const k of b.env.keys()) if (isStartupVar(k)) names.add(k);
  for (const k of names) {
    if (a.env.get(k) !== b.env.get(k)) return `${k} differs from the spare's`;
  }
  if (enumerated) {
    const x = [...a.env.keys()].sort().join('\0');
    const y = [...b.env.keys()].sort().join('\0');
    if (x !== y) return "the variables' names differ from the spare's (a preloaded module listed them)";
  }
  return null;
}

// Options of `node` that make it something other than `node SCRIPT ARGS`: a script whose
// `#!` line gives one is not served.
const FOREIGN_OPTIONS = /^--?(e|p|c|i|eval|print|check|interactive|test|watch|watch-path|input-type|inspect-brk|r|require|import|loader|experimental-loader)(=|$)/;

// How a script's `#!` line runs node: `{node, argv0, options}`, `node` the `#!` line's
// own path or null (`#!/usr/bin/env node`: the session's PATH decides), `argv0` the word
// node is started as, `options` the words after it (only with `env -S`); an `error` instead when it is not a node script
// ngw-node can run as its line does. A file without a `#!` line is run by the PATH's node.
function shebang(head) {
  if (head.length < 2 || head[0] !== 0x23 || head[1] !== 0x21) return { node: null, argv0: 'node', options: [] };
  let end = head.indexOf(10);
  if (end < 0) end = head.length;
  let words = head.subarray(2, end).toString('utf8').trim().split(/[ \t]+/).filter((w) => w);
  let viaEnv = false;
  if (words.length && path.basename(words[0]) === 'env') {
    viaEnv = true;
    words = words.slice(1);
    if (words[0] === '-S') words = words.slice(1);
    else if (words.length > 1) return { error: `its #! line gives env more than one word without -S: ${words.join(' ')}` };
  }
  if (!words.length || !/^node(js)?$/.test(path.basename(words[0]))) {
    return { error: `its #! line runs ${words[0] || 'nothing'}, not node` };
  }
  const options = words.slice(1);
  const foreign = options.find((o) => !o.startsWith('--') || FOREIGN_OPTIONS.test(o));
  if (foreign) return { error: `its #! line gives node ${foreign}` };
  return { node: viaEnv && !words[0].includes('/') ? null : words[0], argv0: words[0], options };
}

// Each file with its signature (inode, size, times), to compare later; `native` is the
// native piece (one call for every file: 223 of eslint's take 33 ms through fs.statSync
// on a loaded machine).
function fingerprint(native, files) {
  const list = [...new Set(files)];
  const sigs = native.signatures(list);
  return { list, sigs };
}

// The first file of a fingerprint that changed since, or null.
function changedFile(native, fp) {
  const now = native.signatures(fp.list);
  for (let i = 0; i < fp.list.length; i++) if (now[i] !== fp.sigs[i]) return fp.list[i];
  return null;
}

const PROJECT = ['package.json', 'package-lock.json', 'npm-shrinkwrap.json', 'yarn.lock', 'pnpm-lock.yaml'];

// The manifests and lockfiles that decide what a program loads: in the directory and in
// the package the script belongs to.
function projectFiles(cwd, script) {
  const out = [];
  if (cwd) for (const f of PROJECT) out.push(path.join(cwd, f));
  let dir;
  try {
    dir = path.dirname(fs.realpathSync(script));
  } catch {
    return out;
  }
  for (;;) {
    if (fs.existsSync(path.join(dir, 'package.json'))) {
      out.push(path.join(dir, 'package.json'));
      break;
    }
    const up = path.dirname(dir);
    if (up === dir) break;
    dir = up;
  }
  return out;
}

// Per script: the CommonJS modules its last warm run loaded, in load order, and the module
// before which preloading stops (one that ran the program, touched stdio or left a handle
// behind when preloaded). Kept in <state dir>/<plugin>.json across workers.
class Learned {
  constructor(dir, plugin) {
    this.file = path.join(dir, `${plugin.replace(/[^A-Za-z0-9._-]/g, '_')}.json`);
    this.scripts = {};
    try {
      this.scripts = JSON.parse(fs.readFileSync(this.file, 'utf8')) || {};
    } catch {
      // nothing learned yet
    }
  }

  modulesFor(script) {
    const s = this.scripts[script];
    if (!s || !Array.isArray(s.modules)) return [];
    const stop = s.stop ? s.modules.indexOf(s.stop) : -1;
    return (stop >= 0 ? s.modules.slice(0, stop) : s.modules).filter((m) => typeof m === 'string');
  }

  // Every module the script's last warm run loaded, those past the stop too (the spare
  // compiles them ahead from the code cache, without running them).
  allModulesFor(script) {
    const s = this.scripts[script];
    return s && Array.isArray(s.modules) ? s.modules.filter((m) => typeof m === 'string') : [];
  }

  // Where the code caches of this plugin's programs are kept (lib/codecache.js).
  codeCacheDir() {
    return this.file.replace(/\.json$/, '.code-cache');
  }

  record(script, modules) {
    const s = this.scripts[script] || {};
    s.modules = modules;
    this.scripts[script] = s;
    this.save();
  }

  stopBefore(script, module) {
    const s = this.scripts[script] || { modules: [] };
    s.stop = module;
    this.scripts[script] = s;
    this.save();
  }

  save() {
    try {
      fs.mkdirSync(path.dirname(this.file), { recursive: true, mode: 0o700 });
      const tmp = `${this.file}.${process.pid}`;
      fs.writeFileSync(tmp, JSON.stringify(this.scripts), { mode: 0o600 });
      fs.renameSync(tmp, this.file);
    } catch {
      // learning is an optimisation
    }
  }
}

module.exports = { isStartupVar, which, key, keyDiff, shebang, fingerprint, changedFile, projectFiles, Learned };
