'use strict';
// A spare: a Node process the worker starts ahead of a session, as
//
//     node -r <sdk>/lib/spare.js <spare dir>/main
//
// in the previous session's directory and environment, with placeholders of the previous
// session's stdio kinds on fds 0-2 and its socket to the worker on fd 3. As Node's
// preload module (`-r`), this file runs before Node resolves and runs its main module, so
// the session's program is then started by Node's own `runMain`, exactly as `node SCRIPT`
// starts it (the same frames under the program's in a stack trace, `require.main`, ESM or
// CommonJS by the same rules): here the spare
//
// 1. preloads the program's learned modules (`require`, in the order the program loaded
//    them), with the program's argv, while recording the environment variables they read
//    and whether they asked what the standard streams are (`isTTY`, `tty.isatty`,
//    `fs.fstatSync` of fds 0-2);
//    it stops at the first module that touches process.stdout/stderr/stdin, calls
//    process.exit, throws, or leaves a handle or timer behind (a module that is the program
//    rather than a library), and reports it, so that the worker stops there next time;
// 2. rehearses what nearly every program does first, on objects of its own
//    (lib/rehearsal.js);
// 3. reports `ready` to the worker with the variables read, and blocks for its session;
// 4. takes the session: the client's descriptors on fds 0-2 (and the pseudo-terminal as
//    its controlling terminal, its job anchored by ngd's `ng`), the umask, ignored
//    signals, the directory, the environment and argv; clears its own traces (execArgv
//    back to the `#!` line's options, its require.cache entry); links `<spare dir>/main`
//    to the script; answers `taken`;
// 5. returns, and Node runs the script.
//
// Nothing here touches process.stdout/stderr/stdin: they are created, lazily, on the
// session's descriptors. Its own messages before the session go to the worker (fd 3).

const fs = require('fs');
const path = require('path');
const codecache = require('./codecache');
const esm = require('./esm');
const argvWatch = require('./argv');
const { Ending } = require('./ending');
const rehearsal = require('./rehearsal');

// The spare's own files: not the program's modules.
const OWN = [__filename, require.resolve('./esm'), require.resolve('./codecache'), require.resolve('./argv'), require.resolve('./ending'), require.resolve('./rehearsal')];
delete require.cache[OWN[1]];
delete require.cache[OWN[3]];
delete require.cache[OWN[4]];
delete require.cache[OWN[5]];

const SOCK = 3;

function main() {
  const dir = path.dirname(process.argv[1]);
  const config = JSON.parse(fs.readFileSync(path.join(dir, 'config.json'), 'utf8'));
  const m = { exports: {} };
  process.dlopen(m, config.native);
  const native = m.exports;
  native.cloexec(SOCK, true);

  const say = (obj) => {
    const line = Buffer.from(`${JSON.stringify(obj)}\n`);
    let off = 0;
    while (off < line.length) {
      const n = native.write(SOCK, line.subarray(off));
      if (n <= 0) break;
      off += n;
    }
  };

  // V8's code cache for what the spare and its session compile (lib/codecache.js).
  const { cache, why } = codecache.start(config);
  const outcome = preload(config, cache);
  esm.forgetWrappers(config);
  spareConfig = config;
  if (cache && outcome.unsafe === undefined) cache.compileAhead(config.codeCache.ahead || []);
  const esmCount = Math.max(0, outcome.preloaded - (config.modules || []).length);
  const rehearsed = outcome.unsafe === undefined ? rehearsal.rehearse(config) : null;
  if (outcome.unsafe === undefined) esm.collectGarbage(config);
  say({ ready: true, ...outcome, esm: esmCount, rehearsed, codeCache: cache ? cache.counts : { off: why } });
  if (outcome.unsafe !== undefined) process.reallyExit(0);

  const session = receive(native);
  if (!session) process.reallyExit(0);
  const ending = new Ending();
  take(native, session, dir, config, ending);
  say({ taken: true });
  learnAtExit(native, cache, !!session.pty, ending);
}

// Requires config.modules in order with the traps in place; what was read and where it
// stopped.
function preload(config, cache) {
  const realEnv = process.env;
  const reads = new Set();
  let enumerated = false;
  process.env = new Proxy(realEnv, {
    get(t, k) {
      if (typeof k === 'string') reads.add(k);
      return t[k];
    },
    has(t, k) {
      if (typeof k === 'string') reads.add(k);
      return k in t;
    },
    ownKeys(t) {
      enumerated = true;
      return Reflect.ownKeys(t);
    },
    getOwnPropertyDescriptor(t, k) {
      if (typeof k === 'string') reads.add(k);
      return Reflect.getOwnPropertyDescriptor(t, k);
    },
  });
  const touched = [];
  const saved = {};
  // The standard streams a preloaded module asked about (is it a terminal, what is it):
  // their kinds are then part of the spare's key.
  const asked = new Set();
  const tty = require('tty');
  const isatty = tty.isatty;
  tty.isatty = function (fd) {
    if (fd === 0 || fd === 1 || fd === 2) asked.add(fd);
    return isatty.call(this, fd);
  };
  const fstatSync = fs.fstatSync;
  fs.fstatSync = function (fd, ...rest) {
    if (fd === 0 || fd === 1 || fd === 2) asked.add(fd);
    return fstatSync.call(this, fd, ...rest);
  };
  ['stdin', 'stdout', 'stderr'].forEach((name, fd) => {
    saved[name] = Object.getOwnPropertyDescriptor(process, name);
    const stub = stdioStub(name, fd, touched, asked);
    Object.defineProperty(process, name, {
      configurable: true,
      enumerable: saved[name] ? saved[name].enumerable : true,
      get: () => stub,
    });
  });
  const exit = process.exit;
  process.exit = () => {
    touched.push('exit');
    throw new Error('ngw-node: a preloaded module called process.exit');
  };
  // The previous session's arguments, whose reads are recorded (lib/argv.js).
  const realArgv = process.argv;
  const argv = realArgv.slice();
  realArgv.splice(1, realArgv.length - 1, config.script, ...(config.args || []));
  const argvReads = argvWatch.record(realArgv, () => touched.push('process.argv'));
  process.argv = argvReads.proxy;

  let unsafe;
  let reason;
  const before = process.getActiveResourcesInfo().length;
  const modules = esm.preloadList(config);
  const eager = esm.compileEagerly(config);
  if (cache) cache.eager = eager;
  let i = 0;
  for (; i < modules.length; i++) {
    try {
      require(modules[i]);
    } catch (e) {
      unsafe = i;
      reason = touched.length ? `touched ${touched.join(', ')}` : `threw ${String(e && e.message).slice(0, 200)}`;
      break;
    }
    if (touched.length) {
      unsafe = i;
      reason = `touched ${touched.join(', ')}`;
      break;
    }
    if (process.getActiveResourcesInfo().length > before) {
      unsafe = i;
      reason = `left ${process.getActiveResourcesInfo().slice(before).join(', ')} behind`;
      break;
    }
  }
  eager.end();
  if (cache) cache.eager = null;
  process.exit = exit;
  tty.isatty = isatty;
  fs.fstatSync = fstatSync;
  for (const name of ['stdin', 'stdout', 'stderr']) {
    if (saved[name]) Object.defineProperty(process, name, saved[name]);
  }
  process.env = realEnv;
  const argvRead = argvReads.end();
  process.argv = realArgv;
  realArgv.splice(0, realArgv.length, ...argv);
  const out = { preloaded: i, reads: [...reads], enumerated, stdio: [...asked], argv0: argv[0], argvRead };
  if (unsafe !== undefined) {
    out.unsafe = unsafe;
    out.module = modules[unsafe];
    out.reason = reason;
  }
  return out;
}

// Set once the spare is the session's process.
let taken = false;

// What a preloaded module gets for process.stdin/stdout/stderr: before the session, only
// the descriptor's number (`fd`) and whether it is a terminal (`isTTY`, as the placeholder
// of the session's kind says), which libraries such as debug read as they load; anything
// else is a module using the stream while it loads, and preloading stops before it. A
// module that kept the object finds it forwarding to the session's own stream afterwards.
function stdioStub(name, fd, touched, asked) {
  const tty = require('tty');
  const real = () => process[name];
  const forward = (op) => (t, ...rest) => Reflect[op](real(), ...rest);
  // The stream's methods, called on the stub, run on the stream itself (`for await` over
  // a kept `stdin`, `setEncoding`): each method as a proxy of itself, one per method.
  const methods = new WeakMap();
  const method = (f) => {
    let m = methods.get(f);
    if (!m) {
      m = new Proxy(f, { apply: (g, self, args) => Reflect.apply(g, self === stub ? real() : self, args) });
      methods.set(f, m);
    }
    return m;
  };
  const stub = new Proxy(Object.create(null), {
    get(t, k) {
      if (taken) {
        const s = real();
        const v = Reflect.get(s, k, s);
        return typeof v === 'function' && k !== 'constructor' ? method(v) : v;
      }
      if (k === 'fd') return fd;
      if (k === 'isTTY') {
        asked.add(fd);
        return tty.isatty(fd) ? true : undefined;
      }
      touched.push(`${name}.${String(k)}`);
      throw new Error(`ngw-node: a preloaded module used process.${name}.${String(k)}`);
    },
    set(t, k, v) {
      if (!taken) {
        touched.push(`${name}.${String(k)}`);
        return false;
      }
      const s = real();
      return Reflect.set(s, k, v, s);
    },
    has: (t, k) => (taken ? Reflect.has(real(), k) : k === 'fd' || k === 'isTTY'),
    ownKeys: (t) => (taken ? Reflect.ownKeys(real()) : []),
    getOwnPropertyDescriptor: (t, k) => (taken ? Reflect.getOwnPropertyDescriptor(real(), k) : undefined),
    defineProperty: forward('defineProperty'),
    deleteProperty: forward('deleteProperty'),
    getPrototypeOf: (t) => (taken ? Reflect.getPrototypeOf(real()) : null),
  });
  return stub;
}

// Blocks until the worker sends the session: a JSON line with the client's descriptors.
function receive(native) {
  let buf = Buffer.alloc(0);
  let fds = [];
  for (;;) {
    const got = native.recv(SOCK, 1 << 20, 16);
    if (got === null) continue;
    fds = fds.concat(got.fds);
    if (got.data.length === 0) return null;
    buf = Buffer.concat([buf, got.data]);
    const nl = buf.indexOf(10);
    if (nl >= 0) {
      const session = JSON.parse(buf.subarray(0, nl).toString('utf8'));
      session.received = fds;
      return session;
    }
  }
}

// Becomes the session's process.
function take(native, s, dir, config, ending) {
  const fds = s.received;
  const devnull = fs.openSync('/dev/null', 'r+');
  for (let fd = 0; fd <= 2; fd++) {
    const i = s.fdMap.indexOf(fd);
    native.putOn(i >= 0 ? fds[i] : devnull, fd);
  }
  if (s.pty !== undefined && s.pty !== null) {
    const slave = fds[s.fdMap.length];
    for (const fd of s.ptyMap) native.putOn(slave, fd);
    native.ctty(s.ptyMap[0]);
    // This process leads its session: `ng` anchors its job, so that the group is not
    // orphaned and the terminal's ^Z stops it (docs/ngw.md 15.7); it exits once its
    // member has joined the group.
    if (s.anchor) {
      require('child_process').spawnSync(s.anchor, [String(process.pid)], { argv0: 'ng:anchor', stdio: 'ignore' });
    }
  }
  for (const fd of fds) native.close(fd);
  native.close(devnull);
  for (const signo of s.ignore) native.ignoreSignal(signo);
  native.umask(s.umask);
  if (s.cwd !== null) process.chdir(s.cwd);
  for (const k of Object.keys(process.env)) delete process.env[k];
  for (const [k, v] of s.env) process.env[k] = v;
  process.argv.splice(0, process.argv.length, process.argv[0], ...s.argv);
  // What the script's `#!` line gives node, as cold; not the spare's `-r`.
  process.execArgv.splice(0, process.execArgv.length, ...(config.execArgv || []));
  ending.watch(process.execArgv, process.env);
  delete require.cache[__filename];
  delete require.cache[require.resolve('./codecache')];
  taken = true;
  fs.symlinkSync(s.target, path.join(dir, 'main'));
}

// When the program exits, sends the worker the modules it loaded (CommonJS, in load
// order), without blocking. Node emits 'exit' through process.emit, on a natural end as
// after process.exit: the spare wraps it (an own property of process, after the program's
// listeners have run) rather than adding a listener the program could count.
//
// Where the exit status is certain (codecache.exitStatus) and nothing Node does after the
// event can be seen (lib/ending.js), the process lets the client's descriptors go and the
// report carries the status (`exiting`), which the worker sends to the client at once:
// Node's own teardown then runs after it. When the session also compiled modules its code
// cache lacks (`cache`), the process writes the cache and exits with that status; where
// the status waits for the process, it writes the cache before its report. A session on
// a terminal (`onTty`: it leads the terminal's session) ends as cold and writes none.
function learnAtExit(native, cache, onTty, ending) {
  const emit = process.emit;
  const wrapped = {
    emit(event, ...args) {
      const before = process.exitCode;
      let result;
      let threw = true;
      try {
        result = emit.call(this, event, ...args);
        threw = false;
      } finally {
        if (event === 'exit' && this === process) {
          const certain = threw ? null : codecache.exitStatus(args[0], before, wrapped);
          const held = threw ? 'an exit listener threw' : onTty ? 'on a terminal' : ending.why();
          const status = held === null ? certain : null;
          const stale = !onTty && certain !== null && cache && cache.stale();
          if (status !== null) letGo(native);
          // A session whose status waits writes its cache first: once per change of it.
          else if (stale) writeCache(cache);
          report(native, cache, status, held);
          if (status !== null && stale) {
            writeCache(cache);
            process.reallyExit(status);
          }
        }
      }
      return result;
    },
  }.emit;
  Object.defineProperty(process, 'emit', { value: wrapped, writable: true, configurable: true, enumerable: false });
}

let reported = false;
let spareConfig = {};

function report(native, cache, status, held) {
  if (reported) return;
  reported = true;
  const modules = Object.keys(require.cache);
  const send = (msg) => {
    try {
      native.write(SOCK, Buffer.from(`${JSON.stringify(msg)}\n`));
    } catch {
      // the worker is gone
    }
  };
  try {
    native.nonblock(SOCK);
  } catch {
    // the worker is gone
  }
  const counts = cache ? { codeCache: cache.counts } : {};
  // The status first, so that the worker sends it while this process learns what the run
  // loaded (lib/esm.js: V8's coverage in a learning run, about 12 ms).
  if (status !== null) send({ exiting: status, ...counts });
  const msg = { modules, ...esm.learnAtExit(spareConfig, modules, OWN) };
  if (status === null) Object.assign(msg, counts, held ? { held } : {});
  send(msg);
  native.close(SOCK);
}

// Puts the null device on fds 0-2: the client's descriptors are let go.
function letGo(native) {
  try {
    const devnull = fs.openSync('/dev/null', 'r+');
    for (let fd = 0; fd <= 2; fd++) native.putOn(devnull, fd);
    native.close(devnull);
  } catch {
    // nothing more to let go
  }
}

// Writes the code cache.
function writeCache(cache) {
  try {
    cache.write();
  } catch {
    // the cache is an optimisation
  }
}

main();
