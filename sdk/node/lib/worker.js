'use strict';
// ngw-node, the worker: runs Node scripts (an npm bin such as node_modules/.bin/eslint, or
// a .js/.mjs/.cjs entry) for ngd, each session in a Node process of its own, exactly as
// `node SCRIPT ARGS` would run it (docs/ngw-node.md). Node cannot fork, so the worker keeps
// a *spare*: a Node process started in the previous session's key that has preloaded the
// program's learned modules (lib/spare.js). A session of the same key takes it; any other
// runs cold, a fresh `node SCRIPT ARGS`, with a `fallback` notice saying why.
//
// The worker is one synchronous loop over poll(): the channel, the session process's end
// (a pidfd), the spare's socket, and the relayed pipes of a session without the client's
// descriptors. Everything Node lacks goes through the native piece (lib/native.js).

const fs = require('fs');
const os = require('os');
const path = require('path');
const { Channel } = require('./channel');
const state = require('./state');
const esm = require('./esm');
const argvWatch = require('./argv');
const rehearsal = require('./rehearsal');
const wire = require('./wire');

const SDK = 'ngw-node/0.1.0';
// Features this worker speaks (docs/ngw.md section 15); the hello lists those ngd offers.
const FEATURES = ['fds', 'signals', 'notices', 'stdin-window', 'ctty'];
const KILL_GRACE_MS = 2000;
const WINDOW = 256 * 1024;
const OUT_HIGH = 1 << 20;
const DRAIN_MS = 100;
// How long the worker waits, after a session's status went at its 'exit' event, for the
// spare's report of what the run loaded.
const REPORT_MS = 2000;
// How long a session's process may write its code cache after its exit status was sent.
const LINGER_MS = 30000;
const POLLIN = 1;
const POLLOUT = 4;
const SPARE_JS = path.join(__dirname, 'spare.js');
const SIGNALS = os.constants.signals;
const SIGNAL_NAMES = Object.fromEntries(Object.entries(SIGNALS).map(([k, v]) => [v, k]));
const STOPS = new Set(['SIGTSTP', 'SIGTTIN', 'SIGTTOU', 'SIGSTOP']);
// The signals whose `i` goes to the command's process group (the rest to its process).
const GROUP = new Set(['SIGINT', 'SIGQUIT', 'SIGHUP', 'SIGTSTP', 'SIGCONT', 'SIGWINCH']);

function log(msg) {
  try {
    fs.writeSync(2, `ngw-node[${process.pid}]: ${msg}\n`);
  } catch {
    // the log is gone
  }
}

function usage(msg) {
  log(msg);
  fs.writeSync(2, 'usage: ngw-node [--no-spare] [--no-learn] [--no-code-cache] [--state-dir DIR] NAME=SCRIPT...\n');
  process.exit(2);
}

// `NAME=SCRIPT` (a bare SCRIPT is looked up on PATH) or `NAME` (looked up as itself).
function commandSpec(spec) {
  const eq = spec.indexOf('=');
  const name = eq < 0 ? spec : spec.slice(0, eq);
  let script = eq < 0 ? spec : spec.slice(eq + 1);
  if (!script.includes('/')) script = state.which(script, process.env.PATH) || script;
  script = path.resolve(script);
  // How its `#!` line runs node (a missing file is reported in the hello).
  let how = { node: null, argv0: 'node', options: [] };
  try {
    const fd = fs.openSync(script, 'r');
    const head = Buffer.alloc(512);
    const n = fs.readSync(fd, head, 0, head.length, 0);
    fs.closeSync(fd);
    how = state.shebang(head.subarray(0, n));
  } catch {
    // no such script
  }
  return { name, script, node: how.node, argv0: how.argv0, options: how.options || [], error: how.error };
}

// The session's header, decoded: the command's environment without NGW_ and NAILGUN_
// entries (malformed entries dropped, the last of repeated names kept, in order), the
// metadata, and whether every argument and variable is valid UTF-8 (Node decodes them so).
function decode(header) {
  const env = new Map();
  const meta = {};
  let utf8 = true;
  const text = (b) => {
    const s = b.toString('utf8');
    if (!Buffer.from(s, 'utf8').equals(b)) utf8 = false;
    return s;
  };
  for (const entry of header.env) {
    const eq = entry.indexOf(61);
    if (eq <= 0 || entry.includes(0)) continue;
    const name = text(entry.subarray(0, eq));
    const value = text(entry.subarray(eq + 1));
    if (name.startsWith('NGW_')) meta[name] = value;
    else if (!name.startsWith('NAILGUN_')) {
      env.delete(name);
      env.set(name, value);
    }
  }
  const umask = /^[0-7]{1,4}$/.test(meta.NGW_UMASK || '') ? parseInt(meta.NGW_UMASK, 8) : process.umask();
  const ignore = (meta.NGW_SIGIGN || '')
    .split(',')
    .filter((s) => s)
    .map((s) => SIGNALS[s.startsWith('SIG') ? s : `SIG${s}`])
    .filter((n) => n !== undefined);
  return {
    args: header.args.map(text),
    rawArgs: header.args,
    rawEnv: [...env].map(([k, v]) => `${k}=${v}`),
    env,
    cwd: header.dir ? text(header.dir) : null,
    command: header.command.toString('utf8'),
    id: meta.NGW_SESSION,
    fdMap: meta.NGW_CLIENT_FDS,
    ptyMap: meta.NGW_CLIENT_PTY,
    winsize: meta.NGW_CLIENT_WINSIZE,
    umask,
    ignore,
    utf8,
    fds: header.fds,
  };
}

// "0,1,2" as [0, 1, 2]: strictly increasing fds among 0-2, or [] if it is not.
function fdList(map) {
  const fds = String(map || '')
    .split(',')
    .filter((s) => s !== '')
    .map(Number);
  const ok = fds.every((f, i) => Number.isInteger(f) && f >= 0 && f <= 2 && (i === 0 || f > fds[i - 1]));
  return ok ? fds : [];
}

class Worker {
  constructor(native, argv) {
    this.native = native;
    this.argv = argv;
    this.quit = false;
    this.retiring = false;
    this.spare = null;
    this.next = null; // what the next spare is started for: {command, key, env, cwd, placeholders}
    this.spareFailures = 0;
  }

  parseArgs() {
    this.useSpares = true;
    this.learn = true;
    this.codeCache = true;
    // ngd names a state directory for its workers (NGW_STATE_DIR); run alone, the user's.
    this.stateDir = process.env.NGW_STATE_DIR
      ? path.join(process.env.NGW_STATE_DIR, 'ngw-node')
      : path.join(process.env.XDG_STATE_HOME || path.join(os.homedir(), '.local', 'state'), 'ngw-node');
    this.commands = new Map();
    const args = this.argv.slice();
    while (args.length) {
      const a = args.shift();
      if (a === '--no-spare') this.useSpares = false;
      else if (a === '--no-learn') this.learn = false;
      else if (a === '--no-code-cache') this.codeCache = false;
      else if (a === '--state-dir') this.stateDir = args.shift() || usage('--state-dir needs a directory');
      else if (a.startsWith('-')) usage(`unknown option ${a}`);
      else {
        const c = commandSpec(a);
        this.commands.set(c.name, c);
      }
    }
  }

  run() {
    const fd = process.env.NGW_FD;
    if (!fd || !/^\d+$/.test(fd)) usage('NGW_FD is not set: ngw-node is started by ngd');
    if (process.env.NGW_VERSION && process.env.NGW_VERSION !== '1') usage(`unsupported ngw protocol ${process.env.NGW_VERSION}`);
    delete process.env.NGW_FD;
    delete process.env.NGW_VERSION;
    // The `ng` that anchors a job on a terminal (docs/ngw.md 15.7), if ngd gave one.
    this.anchor = process.env.NGW_ANCHOR || null;
    delete process.env.NGW_ANCHOR;
    try {
      if (this.anchor) fs.accessSync(this.anchor, fs.constants.X_OK);
    } catch {
      this.anchor = null;
    }
    const host = (process.env.NGW_HOST_FEATURES || '').split(',');
    this.native.cloexec(Number(fd), true);
    this.native.nonblock(Number(fd));
    this.chan = new Channel(this.native, Number(fd));
    this.parseArgs();
    this.features = ['interrupt', ...FEATURES.filter((f) => host.includes(f))];
    if (!(this.has('fds') && this.has('signals'))) this.features = this.features.filter((f) => f !== 'ctty');
    this.learned = new state.Learned(this.stateDir, process.env.NGW_PLUGIN || 'node');
    let error = null;
    if (this.commands.size === 0) error = 'no command to serve';
    for (const c of this.commands.values()) {
      if (!error && !fs.existsSync(c.script)) error = `${c.name}: no such script ${c.script}`;
      if (!error && c.error) error = `${c.name}: ${c.script}: ${c.error}`;
    }
    const hello = { protocol: 1, pid: process.pid };
    if (error) hello.error = error;
    else {
      hello.commands = [...this.commands.keys()];
      hello.features = this.features;
      hello.max_chunk = wire.MAX_CHUNK;
      hello.kill_grace_ms = KILL_GRACE_MS;
      hello.sdk = SDK;
      hello.runtime = `Node.js ${process.version}`;
    }
    this.chan.send('h', JSON.stringify(hello));
    if (error) {
      log(`worker cannot start: ${error}`);
      this.chan.flushAll();
      process.exit(78);
    }
    log(`serving ${hello.commands.join(', ')} with ${this.native.path}`);
    this.idle();
    this.discardSpare('the worker is leaving');
    this.chan.flushAll();
    process.exit(0);
  }

  has(feature) {
    return this.features.includes(feature);
  }

  notice(kind, message, session) {
    if (!this.has('notices')) return;
    const n = { kind, message };
    if (session !== undefined) n.session = Number(session);
    this.chan.send('n', JSON.stringify(n));
  }

  // Between sessions: pings, quit, a session's header; the spare's reports.
  idle() {
    let header = null;
    while (!this.quit && !this.chan.eof) {
      if (!header) this.prepareSpare();
      if (!this.chan.chunks.length) {
        const fds = [this.chan.fd];
        const ev = [POLLIN | (this.chan.out.length ? POLLOUT : 0)];
        if (this.spare) {
          fds.push(this.spare.sock);
          ev.push(POLLIN);
        }
        const rev = this.native.poll(fds, ev, -1);
        if (rev[0] & POLLOUT) this.chan.flush();
        if (this.spare && rev[1]) this.readSpare(this.spare);
        if (!(rev[0] & ~POLLOUT)) continue;
        this.chan.readSome();
      }
      let c;
      while ((c = this.chan.next())) {
        if (header) {
          this.headerChunk(header, c);
          if (c.type === 'C') {
            this.runSession(header);
            header = null;
          }
          continue;
        }
        switch (c.type) {
          case 'p':
            this.chan.send('o', c.payload);
            break;
          case 'q':
            this.quit = true;
            break;
          case 'A':
          case 'E':
          case 'D':
          case 'C':
            header = { args: [], env: [], dir: null, command: null, fds: this.chan.takeFds() };
            this.headerChunk(header, c);
            if (c.type === 'C') {
              this.runSession(header);
              header = null;
            }
            break;
          default:
            for (const fd of this.chan.takeFds()) this.native.close(fd);
        }
        if (this.quit && !header) break;
      }
      if (this.retiring && !header) break;
    }
  }

  headerChunk(header, c) {
    for (const fd of this.chan.takeFds()) header.fds.push(fd);
    if (c.type === 'A') header.args.push(c.payload);
    else if (c.type === 'E') header.env.push(c.payload);
    else if (c.type === 'D') header.dir = c.payload;
    else if (c.type === 'C') header.command = c.payload;
    else if (c.type === 'p') this.chan.send('o', c.payload);
    else if (c.type === 'q') this.quit = true;
  }

  // The client's descriptors: {fds: {fd: received}, slave, ptyFds}, or null (closed).
  clientFds(s) {
    if (!s.fds.length) return null;
    const fds = fdList(s.fdMap);
    const pty = s.ptyMap ? fdList(s.ptyMap) : [];
    const arrived = s.fds.slice();
    let slave = null;
    if (pty.length && arrived.length === fds.length + 1) slave = arrived.pop();
    if (this.has('fds') && fds.length && fds.length === arrived.length && pty.every((f) => fds.includes(f))) {
      if (slave !== null && !this.has('ctty')) {
        this.native.close(slave);
        slave = null;
      }
      return { map: fds, fds: arrived, slave, ptyFds: slave !== null ? pty : [] };
    }
    for (const fd of s.fds) this.native.close(fd);
    return null;
  }

  // One session, from its header to its `X`.
  runSession(header) {
    this.reapLingering();
    const s = decode(header);
    const cmd = this.commands.get(s.command);
    const client = this.clientFds(s);
    if (client) this.chan.send('t', client.slave !== null ? 'ctty' : '');
    else if (s.fds.length) this.chan.send('t', 'relay');
    if (!cmd) {
      this.closeClient(client);
      this.chan.send('2', `ngw-node: unknown command ${s.command}\n`);
      this.chan.send('X', '127\n');
      return;
    }
    const io = client || this.relayPipes();
    const kinds = [0, 1, 2].map((fd) => {
      if (!client) return 'fifo';
      const i = client.map.indexOf(fd);
      if (client.ptyFds.includes(fd)) return 'tty';
      const k = i < 0 ? 'closed' : this.native.kind(client.fds[i]) || 'closed';
      // Node (libuv) treats a character device that is not a terminal as a file.
      return k === 'char' ? 'file' : k;
    });
    // The script's `#!` line decides, as it does cold: its node, or PATH's (env).
    const node = cmd.node || state.which('node', s.env.get('PATH')) || process.execPath;
    const key = state.key(node, s.cwd, kinds, s.env);
    const placeholders = this.placeholdersFor(kinds, client);
    let why = this.coldReason(cmd, s, key);
    let pid = null;
    let kept = [];
    if (!why) {
      const t0 = process.hrtime.bigint();
      // Read before the spare can touch them (libuv makes a pipe non-blocking as it opens
      // the stream): what `restoreFlags` puts back.
      const found = client ? client.fds.map((fd) => this.native.isNonblocking(fd)) : [];
      pid = this.handOver(this.spare, s, cmd, io);
      if (pid !== null && client) {
        kept = client.fds.map((fd, i) => [fd, found[i]]);
        client.fds = [];
      }
      if (pid === null) why = 'the spare ended before it took the session';
      else log(`session ${s.id}: warm, handed over in ${Number(process.hrtime.bigint() - t0) / 1e6} ms${esm.preloadedNote(pid.spare)}${rehearsedNote(pid.spare)}`);
      this.spare = null;
    } else this.discardSpare(why);
    if (pid === null) {
      pid = this.spawnCold(node, cmd, s, io);
      if (pid !== null && why) {
        this.notice('fallback', `${why}; ran cold`, s.id);
        log(`session ${s.id}: ${why}; ran cold`);
      }
    }
    this.closeClient(client);
    if (io.child) for (const fd of io.child) this.native.close(fd);
    if (pid === null) {
      this.chan.send('2', `ngw-node: cannot start node for ${cmd.name}\n`);
      this.chan.send('X', '126\n');
      this.closePlaceholders(placeholders);
      this.closeRelay(io);
      return;
    }
    // The next session's spare starts now, beside this one: a session that follows at
    // once then finds it ready.
    this.next = { cmd, s, node, key, placeholders };
    this.prepareSpare();
    const status = this.follow(pid, io, client);
    this.restoreFlags(kept, io.end);
    this.chan.send('X', status);
    this.closeRelay(io);
    if (pid.spare) this.afterWarm(pid.spare, cmd);
  }

  // Why this session cannot take the spare (runs cold), or null.
  coldReason(cmd, s, key) {
    if (!this.useSpares) return 'spares are off';
    if (!s.utf8) return 'an argument or variable is not UTF-8';
    const spare = this.spare;
    if (!spare) return 'no spare was ready';
    if (spare.cmd.name !== cmd.name) return `the spare was started for ${spare.cmd.name}`;
    this.awaitReady(spare);
    if (spare.dead) return `the spare ended: ${spare.why || 'before the session'}`;
    const diff = state.keyDiff(spare.key, key, spare.reads, spare.enumerated, spare.stdio);
    if (diff) return diff;
    const argvDiff = argvWatch.diff(spare.argvRead, [spare.argv0, cmd.script, ...s.args]);
    if (argvDiff) return argvDiff;
    const changed = state.changedFile(this.native, spare.files);
    if (changed) {
      this.notice('stale', `${changed} changed since the spare loaded it`, s.id);
      return `${changed} changed since the spare loaded it`;
    }
    return null;
  }

  // Blocks until the spare has reported `ready` (or ended).
  awaitReady(spare) {
    while (!spare.ready && !spare.dead) {
      this.native.poll([spare.sock], [POLLIN], 1000);
      this.readSpare(spare);
    }
  }

  // Reads the spare's reports: `ready`, `taken`, the modules it loaded; end of stream.
  readSpare(spare) {
    for (;;) {
      let b;
      try {
        b = this.native.read(spare.sock, 1 << 20);
      } catch {
        b = Buffer.alloc(0);
      }
      if (b === null) return;
      if (b.length === 0) {
        if (!spare.dead) {
          spare.dead = true;
          spare.why = spare.why || 'it exited';
        }
        if (this.spare === spare && !spare.taken) this.discardSpare(null);
        return;
      }
      spare.buf = Buffer.concat([spare.buf, b]);
      let nl;
      while ((nl = spare.buf.indexOf(10)) >= 0) {
        let msg;
        try {
          msg = JSON.parse(spare.buf.subarray(0, nl).toString('utf8'));
        } catch {
          msg = {};
        }
        spare.buf = spare.buf.subarray(nl + 1);
        this.spareMessage(spare, msg);
      }
    }
  }

  spareMessage(spare, msg) {
    if (msg.ready) {
      spare.ready = true;
      spare.reads = msg.reads || [];
      spare.enumerated = !!msg.enumerated;
      spare.stdio = Array.isArray(msg.stdio) ? msg.stdio : [];
      spare.argvRead = Array.isArray(msg.argvRead) ? msg.argvRead : [['all', null]];
      spare.argv0 = typeof msg.argv0 === 'string' ? msg.argv0 : null;
      if (msg.codeCache && typeof msg.codeCache.off === 'string' && msg.codeCache.off !== 'off' && !this.cacheOffLogged) {
        this.cacheOffLogged = true;
        log(`the code cache is off in spares: ${msg.codeCache.off}`);
      }
      if (msg.unsafe !== undefined) {
        spare.dead = true;
        spare.why = `preloading ${msg.module} ${msg.reason}`;
        log(`spare ${spare.pid}: ${spare.why}; the next spares stop before it`);
        this.learned.stopBefore(spare.cmd.script, msg.module);
      } else this.spareFailures = 0;
      spare.esmPreloaded = Number(msg.esm) || 0;
      spare.rehearsed = typeof msg.rehearsed === 'number' ? msg.rehearsed : null;
    } else if (msg.taken) spare.taken = true;
    else if (Number.isInteger(msg.exiting)) {
      // The status went at the 'exit' event, before Node's teardown (lib/ending.js); what
      // the run loaded comes next.
      spare.exiting = msg.exiting;
      this.notice('count', 'status-at-exit');
      if (msg.codeCache) this.cacheCounts(spare, msg.codeCache);
    } else if (msg.modules) {
      if (this.learn) {
        spare.modules = msg.modules;
        spare.esm = msg.esm;
      }
      if (msg.codeCache) this.cacheCounts(spare, msg.codeCache);
      if (typeof msg.held === 'string' && msg.held !== this.heldLogged) {
        // Logged when the reason changes: the status waits for the process's end.
        this.heldLogged = msg.held;
        log(`spare ${spare.pid}: its exit status waits for the process to end (${msg.held})`);
      }
    }
  }

  // A warm session's code cache use (lib/codecache.js): `count` notices (`code-cache-hit`
  // when a module was compiled from the cache, `code-cache-rejected` when V8 rejected one)
  // and a line in the log.
  cacheCounts(spare, counts) {
    const n = (k) => (Number.isInteger(counts[k]) ? counts[k] : 0);
    log(`spare ${spare.pid}: code cache: ${n('hit')} hit, ${n('rejected')} rejected, ${n('missed')} missed, ${n('ahead')} compiled ahead`);
    if (n('hit')) this.notice('count', 'code-cache-hit');
    if (n('rejected')) this.notice('count', 'code-cache-rejected');
  }

  // Session processes still writing their code cache after their exit status was sent
  // (lib/spare.js): reaped here, killed if they take too long.
  reapLingering() {
    this.lingering = (this.lingering || []).filter(({ pid, since }) => {
      let change = null;
      try {
        change = this.native.wait(pid, false);
      } catch {
        return false;
      }
      if (change && (change[0] === 'exited' || change[0] === 'killed')) return false;
      if (Date.now() - since > LINGER_MS) this.native.kill(pid, SIGNALS.SIGKILL);
      return true;
    });
  }

  // Starts the spare for the next session, in the key of the one before, unless there is
  // one (or spares are off, or they keep failing).
  prepareSpare() {
    if (this.spare || !this.next || !this.useSpares || this.retiring || this.quit || this.chan.eof) return;
    const { cmd, s, node, key, placeholders } = this.next;
    this.next = null;
    if (this.spareFailures >= 3) {
      this.closePlaceholders(placeholders);
      return;
    }
    try {
      this.spare = this.startSpare(cmd, s, node, key, placeholders);
    } catch (e) {
      this.spareFailures += 1;
      log(`cannot start a spare: ${e.message}`);
    }
    this.closePlaceholders(placeholders);
  }

  // Descriptors of the kinds `kinds` for a spare's fds 0-2 while it preloads: a pty with
  // the client's terminal modes, a pipe, a socket, or the null device. [{child, ours}].
  placeholdersFor(kinds, client) {
    if (!this.useSpares) return null;
    return kinds.map((kind, fd) => {
      if (kind === 'tty') {
        const [master, slave] = this.native.ptyPair();
        const i = client ? client.map.indexOf(fd) : -1;
        try {
          if (i >= 0) this.native.copyModes(client.fds[i], slave);
        } catch {
          // the client's terminal is not readable: a fresh pty's modes
        }
        return { child: slave, ours: master };
      }
      if (kind === 'fifo') {
        const [r, w] = this.native.pipe();
        return fd === 0 ? { child: r, ours: w } : { child: w, ours: r };
      }
      if (kind === 'socket') {
        const [a, b] = this.native.socketpair();
        return { child: a, ours: b };
      }
      return { child: fs.openSync('/dev/null', fd === 0 ? 'r' : 'w'), ours: null };
    });
  }

  closePlaceholders(placeholders) {
    if (!placeholders) return;
    for (const p of placeholders) {
      if (p.child !== null) this.native.close(p.child);
      p.child = null;
    }
  }

  startSpare(cmd, s, node, key, placeholders) {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ngw-node-'));
    const modules = this.learned.modulesFor(cmd.script);
    const config = { native: this.native.path, script: cmd.script, args: s.args, modules, execArgv: cmd.options, ...esm.forSpare(this.learned, cmd.script, this.learn), rehearse: rehearsal.REHEARSE };
    if (this.codeCache) {
      const preloaded = new Set(modules);
      config.codeCache = { dir: this.learned.codeCacheDir(), ahead: this.learned.allModulesFor(cmd.script).filter((m) => !preloaded.has(m)) };
    }
    fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify(config));
    const [ours, theirs] = this.native.socketpair();
    const fds = [theirs, 3];
    placeholders.forEach((p, fd) => fds.push(p.child, fd));
    let pid;
    try {
      pid = this.native.spawn(node, [cmd.argv0, ...cmd.options, '-r', SPARE_JS, path.join(dir, 'main')], s.rawEnv, s.cwd, fds, {
        session: true,
        dieWithParent: true,
        umask: s.umask,
      });
    } finally {
      this.native.close(theirs);
    }
    this.native.nonblock(ours);
    return {
      pid,
      sock: ours,
      dir,
      cmd,
      key,
      buf: Buffer.alloc(0),
      ready: false,
      dead: false,
      taken: false,
      ours: placeholders.map((p) => p.ours).filter((fd) => fd !== null),
      files: state.fingerprint(this.native, [...modules, ...config.esm, cmd.script, ...state.projectFiles(s.cwd, cmd.script)]),
      started: Date.now(),
    };
  }

  // Ends the spare (its process and descriptors); `why` goes to the log.
  discardSpare(why) {
    const spare = this.spare;
    this.spare = null;
    if (!spare) return;
    if (why) log(`spare ${spare.pid} discarded: ${why}`);
    if (!spare.dead || !spare.reaped) {
      this.native.kill(spare.pid, SIGNALS.SIGKILL);
      try {
        this.native.wait(spare.pid, true);
      } catch {
        // reaped already
      }
    }
    this.forgetSpare(spare);
    if (spare.ready === false || spare.why) this.spareFailures += spare.ready ? 0 : 1;
  }

  forgetSpare(spare) {
    this.native.close(spare.sock);
    for (const fd of spare.ours) this.native.close(fd);
    spare.ours = [];
    fs.rmSync(spare.dir, { recursive: true, force: true });
  }

  // Hands the session to the spare; its pid (as {spare} on the result), or null if it
  // ended before it took it.
  handOver(spare, s, cmd, io) {
    const fds = io.fds.slice();
    if (io.slave !== null && io.slave !== undefined) fds.push(io.slave);
    const msg = {
      argv: [cmd.script, ...s.args],
      env: [...s.env],
      cwd: s.cwd,
      umask: s.umask,
      ignore: s.ignore,
      fdMap: io.map,
      pty: io.slave !== null && io.slave !== undefined ? true : null,
      ptyMap: io.ptyFds || [],
      anchor: this.anchor,
      target: cmd.script,
    };
    const line = Buffer.from(`${JSON.stringify(msg)}\n`);
    let off = 0;
    while (off < line.length && !spare.dead) {
      let n;
      try {
        n = this.native.send(spare.sock, line.subarray(off), off === 0 ? fds : null);
      } catch {
        spare.dead = true;
        break;
      }
      if (n < 0) this.native.poll([spare.sock], [POLLOUT], 100);
      else off += n;
    }
    while (!spare.taken && !spare.dead) {
      this.native.poll([spare.sock], [POLLIN], 1000);
      this.readSpare(spare);
    }
    if (!spare.taken) {
      this.spare = spare;
      this.discardSpare('it ended before it took the session');
      return null;
    }
    for (const fd of spare.ours) this.native.close(fd);
    spare.ours = [];
    const pid = new Number(spare.pid);
    pid.spare = spare;
    return pid;
  }

  // A fresh `node SCRIPT ARGS` on the session's descriptors; its pid, or null.
  spawnCold(node, cmd, s, io) {
    const fds = [];
    let devnull = null;
    for (let fd = 0; fd <= 2; fd++) {
      const i = io.map.indexOf(fd);
      if (i >= 0) fds.push(io.fds[i], fd);
      else {
        if (devnull === null) devnull = fs.openSync('/dev/null', 'r+');
        fds.push(devnull, fd);
      }
    }
    const opts = { session: true, dieWithParent: true, umask: s.umask, ignore: s.ignore };
    let file = node;
    let argv = [cmd.argv0, ...cmd.options, cmd.script, ...s.rawArgs];
    if (io.slave !== null && io.slave !== undefined) {
      for (const fd of io.ptyFds) fds.push(io.slave, fd);
      opts.controlling = io.ptyFds[0];
      // The session leads its job on the terminal: `ng` anchors the job (so that ^Z stops
      // it, docs/ngw.md 15.7) and execs node as argv[0] names it (`node` on the
      // session's PATH, as `env` finds it, or the #! line's path).
      if (this.anchor) {
        file = this.anchor;
        argv = ['ng:anchored', ...argv];
      }
    }
    try {
      return this.native.spawn(file, argv, s.rawEnv, s.cwd, fds, opts);
    } catch (e) {
      log(`cannot start ${node} ${cmd.script}: ${e.message}`);
      return null;
    } finally {
      if (devnull !== null) this.native.close(devnull);
    }
  }

  // Node puts back, as it exits, the O_NONBLOCK flag it found on fds 0-2 when they are
  // still the files it started with: on a normal exit and in its handler of SIGINT and
  // SIGTERM, not after any other signal. A spare started on placeholders, so it does not;
  // the worker does it for the client's descriptors (`kept`: [fd, found], closed here) on
  // the same ends, before the exit status reaches the client, as a cold run does before
  // its exit.
  restoreFlags(kept, end) {
    const resets = end && (end[0] === 'exited' || (end[0] === 'killed' && (end[1] === SIGNALS.SIGINT || end[1] === SIGNALS.SIGTERM)));
    for (const [fd, found] of kept) {
      if (resets) {
        try {
          if (this.native.isNonblocking(fd) !== found) this.native.setNonblocking(fd, found);
        } catch {
          // closed or gone: nothing to put back
        }
      }
      this.native.close(fd);
    }
  }

  closeClient(client) {
    if (!client) return;
    for (const fd of client.fds) this.native.close(fd);
    if (client.slave !== null) this.native.close(client.slave);
    client.fds = [];
    client.slave = null;
  }

  // Pipes for a session without the client's descriptors: the child's ends in `child`
  // (fds 0, 1, 2), ours non-blocking.
  relayPipes() {
    const [inR, inW] = this.native.pipe();
    const [outR, outW] = this.native.pipe();
    const [errR, errW] = this.native.pipe();
    for (const fd of [inW, outR, errR]) this.native.nonblock(fd);
    return {
      map: [0, 1, 2],
      fds: [inR, outW, errW],
      child: [inR, outW, errW],
      slave: null,
      ptyFds: [],
      relay: { in: inW, out: outR, err: errR, stdin: [], eof: false, granted: 0, asked: false },
    };
  }

  closeRelay(io) {
    if (!io.relay) return;
    for (const k of ['in', 'out', 'err']) {
      if (io.relay[k] !== null) this.native.close(io.relay[k]);
      io.relay[k] = null;
    }
  }

  // Relays and delivers interrupts until the session's process has ended and its output
  // has drained; the `X` payload.
  follow(pid, io) {
    const p = Number(pid);
    const pidfd = this.native.pidfd(p);
    const r = io.relay;
    let status = null;
    let stopForwarded = false;
    let killAt = null;
    let endedAt = null;
    let lastOut = Date.now();
    const window = this.has('stdin-window');
    const ask = () => {
      if (!r || r.eof || r.in === null) return;
      if (window) {
        if (r.granted <= WINDOW / 2 && !r.stdin.length) {
          this.chan.send('S', String(WINDOW - r.granted));
          r.granted = WINDOW;
        }
      } else if (!r.asked && !r.stdin.length) {
        this.chan.send('S');
        r.asked = true;
      }
    };
    ask();
    for (;;) {
      if (status !== null && (!r || (r.out === null && r.err === null) || Date.now() - lastOut > DRAIN_MS)) break;
      const fds = [this.chan.fd];
      const ev = [POLLIN | (this.chan.out.length ? POLLOUT : 0)];
      if (status === null) {
        fds.push(pidfd);
        ev.push(POLLIN);
      }
      // A spare's report may carry the exit status before the process ends (lib/spare.js).
      const spare = pid.spare && status === null && !pid.spare.dead ? pid.spare : null;
      const spareAt = spare ? fds.push(spare.sock) - 1 : -1;
      if (spare) ev.push(POLLIN);
      const below = this.chan.outBytes < OUT_HIGH;
      if (r) {
        if (r.out !== null && below) fds.push(r.out), ev.push(POLLIN);
        if (r.err !== null && below) fds.push(r.err), ev.push(POLLIN);
        if (r.in !== null && r.stdin.length) fds.push(r.in), ev.push(POLLOUT);
      }
      let timeout = -1;
      if (this.has('signals') && status === null) timeout = 100;
      if (killAt !== null) timeout = Math.max(0, Math.min(timeout < 0 ? 1e9 : timeout, killAt - Date.now()));
      if (status !== null) timeout = DRAIN_MS;
      const rev = this.native.poll(fds, ev, timeout);
      if (spare && rev[spareAt]) {
        this.readSpare(spare);
        if (spare.exiting !== undefined && status === null) {
          io.end = ['exited', spare.exiting];
          status = `${spare.exiting}\n`;
          endedAt = Date.now();
          lastOut = endedAt;
          this.lingering = this.lingering || [];
          this.lingering.push({ pid: p, since: endedAt });
        }
      }
      if (rev[0] & POLLOUT) this.chan.flush();
      if (rev[0] & ~POLLOUT) {
        this.chan.readSome();
        let c;
        while ((c = this.chan.next())) {
          if (c.type === '0' && r) {
            if (window) r.granted = Math.max(0, r.granted - c.payload.length);
            r.asked = false;
            if (r.in !== null && c.payload.length) r.stdin.push(c.payload);
          } else if (c.type === '.' && r) {
            r.eof = true;
            if (!r.stdin.length && r.in !== null) {
              this.native.close(r.in);
              r.in = null;
            }
          } else if (c.type === 'i') {
            const what = c.payload.toString('latin1');
            if (what === 'hangup') {
              if (status === null) this.native.killGroup(p, SIGNALS.SIGHUP);
              if (r && r.in !== null) {
                this.native.close(r.in);
                r.in = null;
              }
              killAt = Date.now() + KILL_GRACE_MS;
            } else if (what.startsWith('winsize')) {
              if (status === null && !io.ptyFds.length) this.native.killGroup(p, SIGNALS.SIGWINCH);
            } else {
              const [name, target] = what.split(' ');
              const signo = SIGNALS[name];
              if (signo !== undefined && status === null) {
                if (STOPS.has(name)) stopForwarded = true;
                if (name === 'SIGCONT') stopForwarded = false;
                if (target === 'process' || !GROUP.has(name)) this.native.kill(p, signo);
                else this.native.killGroup(p, signo);
              }
            }
          } else if (c.type === 'p') this.chan.send('o', c.payload);
          else if (c.type === 'q') this.quit = true;
        }
        if (this.chan.eof && status === null) {
          this.native.killGroup(p, SIGNALS.SIGHUP);
          if (killAt === null) killAt = Date.now() + KILL_GRACE_MS;
        }
      }
      if (r) {
        for (const [k, type] of [
          ['out', '1'],
          ['err', '2'],
        ]) {
          if (r[k] === null) continue;
          for (;;) {
            if (this.chan.outBytes >= OUT_HIGH) break;
            let b;
            try {
              b = this.native.read(r[k], wire.OUT_CHUNK);
            } catch {
              b = Buffer.alloc(0);
            }
            if (b === null) break;
            if (b.length === 0) {
              this.native.close(r[k]);
              r[k] = null;
              break;
            }
            lastOut = Date.now();
            this.chan.send(type, b);
          }
        }
        while (r.in !== null && r.stdin.length) {
          let n;
          try {
            n = this.native.write(r.in, r.stdin[0]);
          } catch {
            r.stdin = [];
            this.native.close(r.in);
            r.in = null;
            r.eof = true;
            break;
          }
          if (n < 0) break;
          if (n === r.stdin[0].length) r.stdin.shift();
          else r.stdin[0] = r.stdin[0].subarray(n);
        }
        if (r.in !== null && r.eof && !r.stdin.length) {
          this.native.close(r.in);
          r.in = null;
        }
        ask();
      }
      if (status === null) {
        const change = this.native.wait(p, false);
        if (change) {
          if (change[0] === 'exited' || change[0] === 'killed') io.end = change;
          if (change[0] === 'exited') status = `${change[1]}\n`;
          else if (change[0] === 'killed') {
            const name = SIGNAL_NAMES[change[1]] || `SIG${change[1]}`;
            status = this.has('signals') ? `${128 + change[1]} ${name}${change[2] ? ' core' : ''}\n` : `${128 + change[1]}\n`;
          } else if (change[0] === 'stopped' && this.has('signals') && !stopForwarded) {
            this.chan.send('z', SIGNAL_NAMES[change[1]] || 'SIGSTOP');
          }
          if (status !== null) {
            endedAt = Date.now();
            lastOut = endedAt;
          }
        }
      }
      if (killAt !== null && Date.now() >= killAt && status === null) {
        this.native.killGroup(p, SIGNALS.SIGKILL);
        killAt = null;
      }
    }
    this.native.close(pidfd);
    if (pid.spare) this.readSpare(pid.spare);
    return status;
  }

  // After a warm session: what the spare learned, then its leftovers.
  afterWarm(spare, cmd) {
    // A status sent at the 'exit' event comes before the report of what the run loaded:
    // waited for here, after the client has its status (at most REPORT_MS).
    const until = Date.now() + REPORT_MS;
    while (this.learn && spare.exiting !== undefined && spare.modules === undefined && !spare.dead) {
      const left = until - Date.now();
      if (left <= 0) break;
      this.native.poll([spare.sock], [POLLIN], left);
      this.readSpare(spare);
    }
    if (spare.modules && this.learn) {
      let real = cmd.script;
      try {
        real = fs.realpathSync(cmd.script);
      } catch {
        // gone: nothing is preloaded from it anyway
      }
      const modules = spare.modules.filter((m) => m !== real && m !== spare.dir + '/main');
      const before = this.learned.modulesFor(cmd.script).length;
      this.learned.record(cmd.script, modules);
      if (modules.length !== before) log(`${cmd.name}: learned ${modules.length} module(s) to preload`);
      const n = esm.record(this.learned, cmd.script, spare.esm, [real, spare.dir + '/main']);
      if (n !== null) log(`${cmd.name}: learned ${n} ES module(s) to preload`);
    }
    spare.reaped = true;
    this.forgetSpare(spare);
  }
}

// The handed-over line's note on the spare's rehearsal (lib/rehearsal.js).
function rehearsedNote(spare) {
  return spare && spare.rehearsed !== null && spare.rehearsed !== undefined ? `, rehearsed (${spare.rehearsed.toFixed(1)} ms)` : '';
}

function main(argv) {
  let native;
  try {
    native = require('./native').load();
  } catch (e) {
    log(e.message);
    process.exit(2);
  }
  native.path = require('./native').locate();
  new Worker(native, argv).run();
}

module.exports = { main, decode, fdList, Worker };
