'use strict';
// V8's code cache for the CommonJS modules a spare and its session compile
// (docs/ngw-node.md, "The code cache").
//
// Node 20 has no `module.enableCompileCache`, so the spare compiles modules itself:
// `Module.prototype._compile` becomes an accessor that, for a module this file can compile
// (a `.js`/`.cjs` file of a CommonJS package that compiles as a script), returns a
// `_compile` of ours; for any other (a syntax error, an ES module, a loader's source) it
// returns Node's own, unchanged. Ours compiles the module's source wrapped as Node wraps it
// (the same parameters, the source from the next line with the line numbers put back, so
// every position and `Function.prototype.toString` are Node's) with `vm.Script` and the
// cached data of an earlier run, gets the module's `require` from Node's own `_compile`
// (`return require;` compiled as that module: `require.main`, `resolve` and their frames
// are Node's), and calls the module's function from a frame that prints as Node's
// `Module._compile` frame (its source is placed at the file, line and column Node's call
// has; checked against a real one as this file loads, or the cache is off).
//
// The spare also compiles ahead, without running them, the modules it cannot preload
// (TypeScript's `lib/_tsc.js` runs the compiler as it loads): the session then runs them
// from the compiled script.
//
// Caches are made after the code ran (`script.createCachedData()` then holds the functions
// the run compiled lazily), by the session's process as it exits, once its exit status is
// with the worker and the client's descriptors are closed: never in the session's time.
// One bundle per program (its script), keyed by Node's version, architecture and options,
// each module's entry by its file's path, size, times and inode; written atomically, the
// directory bounded (oldest bundles dropped first). V8 checks the source and its own flags
// too: a rejected cache is counted and the module compiled afresh.

const fs = require('fs');
const path = require('path');
const vm = require('vm');
const crypto = require('crypto');
const Module = require('module');

const MAGIC = 'ngw-node-code-cache 1\n';
const LIMIT = 128 << 20;
const WRAP = '(function (exports, require, module, __filename, __dirname) {\n';
// What may be a dynamic `import(`: the word `import` not after a quote, a dot or a name's
// character, then `(`. A module with one in its code is compiled by Node: a `vm.Script`
// cannot import as a module does (with a cache, Node 20 loses the script's import
// callback; Node 22 warns that the callback is experimental). Whether one is code or in a
// comment, string or regular expression, V8 says: `import.(` is a syntax error in code
// only. A module that also calls `eval` or `Function` (which could import from a string)
// is compiled by Node.
const DYNAMIC_IMPORT = /(?:^|[^\w$'"`.])import(?=\s*\()/gm;
const EVAL = /\b(?:eval|Function)\s*\(/;

// Node's own `_compile`, and the frame it runs a module's function from, as seen by this
// very module while it loads (compiled by Node).
const original = Module.prototype._compile;
const coldFrame = callerFrame();
const kIsExecuting = Object.getOwnPropertySymbols(module).find((s) => s.description === 'kIsExecuting');

// The frame below the module's function: "Module._compile (node:...:L:C)", or null.
function callerFrame() {
  const sites = callSites();
  const i = sites.findLastIndex((c) => c.getFileName() === __filename);
  const c = i >= 0 ? sites[i + 1] : null;
  if (!c || !String(c.getFileName()).startsWith('node:')) return null;
  return { text: String(c), file: c.getFileName(), line: c.getLineNumber(), column: c.getColumnNumber() };
}

function callSites(skip) {
  const prepare = Error.prepareStackTrace;
  const limit = Error.stackTraceLimit;
  Error.prepareStackTrace = (e, sites) => sites;
  Error.stackTraceLimit = 20;
  const holder = {};
  Error.captureStackTrace(holder, skip || callSites);
  const sites = holder.stack;
  Error.prepareStackTrace = prepare;
  Error.stackTraceLimit = limit;
  return Array.isArray(sites) ? sites : [];
}

// The file's signature: what a cache entry is valid for.
function signature(file) {
  try {
    const st = fs.statSync(file, { bigint: true });
    return `${st.size}:${st.mtimeNs}:${st.ctimeNs}:${st.ino}`;
  } catch {
    return null;
  }
}

// What else decides whether V8 accepts a cache: Node and its options.
function runtimeKey() {
  return [process.version, process.arch, process.execArgv.join(' '), process.env.NODE_OPTIONS || ''].join('\0');
}

// Why the cache cannot be used in this process, or null.
function unusable() {
  if (!coldFrame) return "Node's Module._compile frame was not found";
  const options = `${process.execArgv.join(' ')} ${process.env.NODE_OPTIONS || ''}`;
  const foreign = /--(inspect|debug|experimental-policy|policy-integrity|enable-source-maps|experimental-loader|loader|import|require|experimental-vm-modules|cpu-prof|heap-prof|prof)\b/.exec(options);
  if (foreign) return `node runs with ${foreign[0]}`;
  if (process.sourceMapsEnabled) return 'source maps are enabled';
  return null;
}

class CodeCache {
  // `dir`: where bundles are kept; `script`: the program they are for.
  constructor(dir, script, { limit = LIMIT } = {}) {
    this.dir = dir;
    this.limit = limit;
    // Taken as the spare starts (a session puts back its own execArgv).
    this.runtime = runtimeKey();
    this.file = path.join(dir, `${crypto.createHash('sha256').update(`${script}\0${this.runtime}`).digest('hex').slice(0, 32)}.bin`);
    this.entries = new Map(); // file -> {sig, data}: the bundle as read
    this.compiled = new Map(); // file -> {script, sig, source}: what this process compiled
    this.ahead = new Map(); // file -> {script, sig, source}: compiled ahead, not run yet
    this.pending = new WeakMap(); // module -> {script, sig, source}: between the accessor and the call
    this.packageType = new Map(); // directory -> the nearest package.json's "type"
    this.counts = { hit: 0, rejected: 0, missed: 0, ahead: 0 };
    this.off = unusable();
    this.fake = null;
    // The spare's eager compilation while it preloads (lib/esm.js compileEagerly), or null.
    this.eager = null;
  }

  // Installs the accessor; false (and `off` says why) if the cache cannot be used here.
  install() {
    if (this.off) return false;
    try {
      this.fake = fakeCompile((mod, content, filename, format) => this.take(mod, content, filename, format));
    } catch (e) {
      this.off = e.message;
      return false;
    }
    this.read();
    const cache = this;
    Object.defineProperty(Module.prototype, '_compile', {
      configurable: true,
      enumerable: true,
      get() {
        try {
          return cache.choose(this);
        } catch {
          return original;
        }
      },
      set(value) {
        // A require hook of the program's own (pirates, ts-node): Node's behaviour from now on.
        cache.off = 'the program replaced Module.prototype._compile';
        Object.defineProperty(Module.prototype, '_compile', { value, writable: true, configurable: true, enumerable: true });
      },
    });
    return true;
  }

  read() {
    let buf;
    try {
      buf = fs.readFileSync(this.file);
    } catch {
      return;
    }
    try {
      if (buf.subarray(0, MAGIC.length).toString('latin1') !== MAGIC) return;
      const nl = buf.indexOf(10, MAGIC.length);
      const head = JSON.parse(buf.subarray(MAGIC.length, nl).toString('utf8'));
      if (head.runtime !== this.runtime) return;
      let off = nl + 1;
      for (const [file, sig, length, checked] of head.entries) {
        this.entries.set(file, { sig, data: buf.subarray(off, off + length), checked: checked === 1 });
        off += length;
      }
    } catch {
      this.entries.clear();
    }
  }

  // Node's `_compile` or ours, for the module `mod` (`filename` set, as Module#load sets it
  // before its extension runs).
  choose(mod) {
    if (this.off || !(mod instanceof Module) || typeof mod.filename !== 'string') return original;
    const file = mod.filename;
    if (!(file.endsWith('.js') || file.endsWith('.cjs'))) return original;
    if (file.endsWith('.js') && this.typeOf(path.dirname(file)) === 'module') return original;
    const sig = signature(file);
    let c = this.ahead.get(file);
    this.ahead.delete(file);
    if (!c || c.sig !== sig) c = this.compile(file, sig);
    if (!c) return original;
    this.pending.set(mod, c);
    return this.fake;
  }

  // The "type" of the package.json nearest to `dir`, as Node reads it for a `.js` file.
  typeOf(dir) {
    if (this.packageType.has(dir)) return this.packageType.get(dir);
    let type = null;
    let json = null;
    try {
      json = fs.readFileSync(path.join(dir, 'package.json'), 'utf8');
    } catch {
      // none here
    }
    if (json !== null) {
      try {
        type = JSON.parse(json).type || null;
      } catch {
        type = 'invalid';
      }
    } else if (path.dirname(dir) !== dir && path.basename(dir) !== 'node_modules') type = this.typeOf(path.dirname(dir));
    this.packageType.set(dir, type);
    return type;
  }

  // Compiles `file` (at signature `sig`) from its cache if one matches; null if it does
  // not compile as a CommonJS script (Node's own `_compile` then compiles it, and throws
  // its own error).
  compile(file, sig) {
    if (sig === null) return null;
    let source;
    try {
      source = fs.readFileSync(file, 'utf8');
    } catch {
      return null;
    }
    const entry = this.entries.get(file);
    const cached = entry && entry.sig === sig ? entry.data : undefined;
    const script = this.scriptOf(file, source, cached, !!(cached && entry.checked));
    if (!script) return null;
    if (cached) {
      if (script.cachedDataRejected) this.counts.rejected += 1;
      else this.counts.hit += 1;
    } else this.counts.missed += 1;
    const c = { script, sig, source, cached: !!cached && !script.cachedDataRejected };
    this.compiled.set(file, c);
    return c;
  }

  // `checked`: the source is known to have no dynamic import in its code.
  scriptOf(file, source, cachedData, checked) {
    // A `#!` line is a comment for V8 only at the start of a script: the same length of comment.
    const body = source.startsWith('#!') ? `//${source.slice(2)}` : source;
    DYNAMIC_IMPORT.lastIndex = 0;
    if (!checked && DYNAMIC_IMPORT.test(body)) {
      if (EVAL.test(body)) return null;
      try {
        new vm.Script(`${WRAP}${body.replace(DYNAMIC_IMPORT, (m) => `${m}.`)}\n})`, { filename: file });
      } catch {
        return null; // an import in code: Node compiles the module
      }
    }
    const options = { filename: file, lineOffset: -1 };
    if (cachedData) options.cachedData = cachedData;
    const compile = () => new vm.Script(`${WRAP}${body}\n})`, options);
    try {
      return cachedData && this.eager ? this.eager.lazily(compile) : compile();
    } catch {
      return null;
    }
  }

  // Compiles ahead, without running them, the modules `files` (those a spare does not
  // preload): the session's `require` then finds them compiled.
  compileAhead(files) {
    if (this.off) return;
    for (const file of files) {
      if (this.compiled.has(file) || this.ahead.has(file)) continue;
      if (typeof file !== 'string' || !(file.endsWith('.js') || file.endsWith('.cjs'))) continue;
      const c = this.compile(file, signature(file));
      if (c) {
        this.ahead.set(file, c);
        this.counts.ahead += 1;
      }
    }
  }

  // What our `_compile` runs for `mod`: `{fn}`, the module's function, or null (Node's own
  // `_compile` then runs: an ES module, or source other than the file's).
  take(mod, content, filename, format) {
    const c = this.pending.get(mod);
    this.pending.delete(mod);
    if (!c || (format !== undefined && format !== 'commonjs') || content !== c.source) {
      if (c) this.compiled.delete(filename);
      return null;
    }
    // As Node runs its wrapper: errors displayed with their source line.
    return { fn: c.script.runInThisContext({ displayErrors: true }) };
  }

  // Whether this run compiled anything its bundle does not hold yet.
  stale() {
    if (this.off) return false;
    for (const c of this.compiled.values()) if (!c.cached) return true;
    return false;
  }

  // Writes the bundle: a cache made now (after the run) for every module this process
  // compiled, and the entries it did not use whose files are unchanged. Then drops the
  // oldest bundles beyond the directory's limit.
  write() {
    const entries = [];
    const datas = [];
    for (const [file, c] of this.compiled) {
      let data;
      try {
        data = c.script.createCachedData();
      } catch {
        continue;
      }
      entries.push([file, c.sig, data.length, 1]);
      datas.push(data);
    }
    for (const [file, e] of this.entries) {
      if (this.compiled.has(file) || signature(file) !== e.sig) continue;
      entries.push([file, e.sig, e.data.length, e.checked ? 1 : 0]);
      datas.push(e.data);
    }
    fs.mkdirSync(this.dir, { recursive: true, mode: 0o700 });
    const tmp = `${this.file}.${process.pid}.tmp`;
    const head = Buffer.from(`${MAGIC}${JSON.stringify({ runtime: this.runtime, entries })}\n`);
    fs.writeFileSync(tmp, Buffer.concat([head, ...datas]), { mode: 0o600 });
    fs.renameSync(tmp, this.file);
    prune(this.dir, this.limit, this.file);
  }
}

// Drops the oldest bundles (by modification time) until the directory holds at most
// `limit` bytes; `keep` is never dropped.
function prune(dir, limit, keep) {
  let files;
  try {
    files = fs.readdirSync(dir).map((name) => {
      const p = path.join(dir, name);
      const st = fs.statSync(p);
      return { p, size: st.size, mtime: st.mtimeMs };
    });
  } catch {
    return;
  }
  let total = files.reduce((n, f) => n + f.size, 0);
  files.sort((a, b) => a.mtime - b.mtime);
  for (const f of files) {
    if (total <= limit) break;
    if (f.p === keep) continue;
    try {
      fs.unlinkSync(f.p);
      total -= f.size;
    } catch {
      // gone already
    }
  }
}

// Our `_compile`, with its call of the module's function on its first line, the script
// placed so that the frame of that call prints as Node's (`coldFrame`); its second line
// runs Node's own when `take` finds nothing to run (a loader changed the source).
const FAKE =
  '(function (take, original, kIsExecuting, dirname, ReflectApply) { return function _compile(content, filename, format) { const c = take(this, content, filename, format); if (!c) return fallback.call(this, content, filename, format); const require = original.call(this, "return require;", filename, format); if (kIsExecuting) this[kIsExecuting] = true; const exports = this.exports; const result = ReflectApply(c.fn, exports, [exports, require, this, filename, dirname(filename)]);\n' +
  'if (kIsExecuting) this[kIsExecuting] = false; return result; }; function fallback(content, filename, format) { return original.call(this, content, filename, format); } })';

// Builds our `_compile` over `take(mod, content, filename, format)` (`{fn}` or null);
// throws if its frame cannot be made to print as Node's.
function fakeCompile(take) {
  const build = (lineOffset, columnOffset, t) =>
    new vm.Script(FAKE, { filename: coldFrame.file, lineOffset, columnOffset }).runInThisContext()(t, original, kIsExecuting, path.dirname, Reflect.apply);
  // Where the call's frame is, built at the given offsets.
  const probe = (lineOffset, columnOffset) => {
    let site = null;
    const record = {
      fn() {
        site = callSites(record.fn)[0] || null;
      },
    };
    const file = path.join(__dirname, 'ngw-node-probe.js');
    const mod = new Module(file, null);
    mod.filename = file;
    build(lineOffset, columnOffset, () => record).call(mod, '', file, undefined);
    if (!site) throw new Error('the probe saw no frame');
    return site;
  };
  const at0 = probe(0, 0);
  const lineOffset = coldFrame.line - at0.getLineNumber();
  const columnOffset = coldFrame.column - at0.getColumnNumber();
  const placed = String(probe(lineOffset, columnOffset));
  if (placed !== coldFrame.text) throw new Error(`our frame would print as ${placed}, not ${coldFrame.text}`);
  return build(lineOffset, columnOffset, take);
}

// The status the process exits with after the 'exit' event that just ended normally, when
// that is certain: a natural end (the event emitted by Node itself, no frame below) or
// `process.exit` (its frame below), and `process.exitCode` not changed by a listener
// (`before`, what it was before the event). Null otherwise (an uncaught error, whose
// report Node prints after the event).
function exitStatus(code, before, emitter) {
  if (process._exiting !== true || process.exitCode !== before) return null;
  const sites = callSites(emitter);
  const below = sites[0];
  const natural = sites.length === 0;
  const viaExit = below && below.getFunctionName() === 'exit' && String(below.getFileName()).startsWith('node:internal/process/');
  if (!natural && !viaExit) return null;
  const status = process.exitCode === undefined ? code : process.exitCode;
  return Number.isInteger(status) && status === code ? status & 0xff : null;
}

// The spare's cache for `config` (`config.codeCache`: {dir, ahead}), installed; or null
// (and `why`) when it cannot be used in this process.
function start(config) {
  if (!config.codeCache) return { cache: null, why: 'off' };
  try {
    const cache = new CodeCache(config.codeCache.dir, config.script);
    if (!cache.install()) return { cache: null, why: cache.off };
    return { cache, why: null };
  } catch (e) {
    return { cache: null, why: String(e && e.message) };
  }
}

module.exports = { CodeCache, signature, runtimeKey, exitStatus, start };
