'use strict';
// Whether a session's exit status may reach the client before its process has ended
// (docs/ngw-node.md, "The end of a session").
//
// After the `'exit'` event Node runs no more JavaScript: it frees the environment and the
// heap, stops its threads and exits, 3-8 ms for a preloaded spare. A cold `node` keeps its
// client waiting through all of it. The spare instead puts the null device on fds 0-2 at
// the end of the event and reports the status, which the worker sends at once, as the
// Python worker's exit report does. That is the same to the client only where what Node
// does after the event cannot be seen through the client's descriptors or in a file the
// client reads next. `Ending.why()` names the first thing that may be, and the session
// then ends as cold:
//
// * a native addon was loaded (`.node` in require.cache): its cleanup hooks run after the
//   event and may write;
// * a worker thread was started during the session: it runs until Node stops it;
// * V8 coverage (`NODE_V8_COVERAGE`) or a node option outside a list known to do nothing
//   at exit (profiles, reports, `--inspect`, ... write or wait as the process ends).
//
// The status itself must be certain (lib/codecache.js `exitStatus`), and a session on a
// terminal, which leads the terminal's session, always ends as cold.

// Options (the `#!` line's, NODE_OPTIONS) that do nothing after the `'exit'` event.
const QUIET = new RegExp(
  '^--(?:' +
    [
      'max-old-space-size',
      'max-semi-space-size',
      'stack-size',
      'no-warnings',
      'no-deprecation',
      'disable-warning',
      'pending-deprecation',
      'throw-deprecation',
      'trace-deprecation',
      'trace-warnings',
      'trace-uncaught',
      'enable-source-maps',
      'unhandled-rejections',
      'dns-result-order',
      'use-openssl-ca',
      'use-bundled-ca',
      'openssl-legacy-provider',
      'tls-[a-z0-9-]+',
      'preserve-symlinks',
      'preserve-symlinks-main',
      'conditions',
      'input-type',
      'no-addons',
      'max-http-header-size',
      'experimental-[a-z0-9-]+',
      'no-experimental-[a-z0-9-]+',
      'require-module',
      'no-require-module',
      'no-lazy',
      'lazy',
      'jitless',
      'frozen-intrinsics',
      'disallow-code-generation-from-strings',
    ].join('|') +
    ')(?:=.*)?$'
);

class Ending {
  constructor() {
    this.fixed = null; // what the session's start already rules out
    // Worker threads started since `watch`: counted from Node's own `worker_threads`
    // diagnostics channel (Node 20 and later publish it; on older ones a loaded
    // `worker_threads` counts).
    this.workers = 0;
    this.channel = false;
  }

  // At the session's start: its node options and environment (those Node started with:
  // they are part of the spare's key).
  watch(execArgv, env) {
    const options = [...execArgv, ...String(env.NODE_OPTIONS || '').split(/\s+/)].filter((o) => o !== '');
    const loud = options.find((o) => !QUIET.test(o));
    if (env.NODE_V8_COVERAGE !== undefined) this.fixed = 'NODE_V8_COVERAGE is set';
    else if (loud !== undefined) this.fixed = `node option ${loud.split('=')[0]}`;
    if (this.fixed !== null || Number(process.versions.node.split('.')[0]) < 20) return;
    try {
      require('diagnostics_channel').subscribe('worker_threads', () => {
        this.workers += 1;
      });
      this.channel = true;
    } catch {
      // a loaded worker_threads counts instead
    }
  }

  // Why the status may not go before the process ends, or null if it may.
  why() {
    if (this.fixed !== null) return this.fixed;
    if (Object.keys(require.cache).some((f) => f.endsWith('.node'))) return 'a native addon is loaded';
    if (this.workers > 0) return 'a worker thread was started';
    if (!this.channel && (process.moduleLoadList || []).includes('NativeModule worker_threads')) {
      return 'worker_threads is loaded';
    }
    return null;
  }
}

module.exports = { Ending };
