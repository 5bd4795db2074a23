'use strict';
// The native piece (sdk/node/native, Rust on ng-sys): an N-API addon loaded with
// process.dlopen. Found at NGW_NODE_NATIVE, else beside the SDK (native/libngw_node.so, as
// ngd writes it out), else in the workspace's cargo target directory (the newer of the
// release and debug builds).

const fs = require('fs');
const path = require('path');

const NAME = 'libngw_node.so';

function candidates() {
  const sdk = path.resolve(__dirname, '..');
  const root = path.resolve(sdk, '..', '..');
  const out = [];
  if (process.env.NGW_NODE_NATIVE) out.push(process.env.NGW_NODE_NATIVE);
  out.push(path.join(sdk, 'native', NAME));
  const target = process.env.CARGO_TARGET_DIR || path.join(root, 'target');
  out.push(path.join(target, 'release', NAME), path.join(target, 'debug', NAME));
  return out;
}

// The addon's path, or null: the first of NGW_NODE_NATIVE and the SDK's own copy that
// exists, else the newer of the workspace's release and debug builds.
function locate() {
  const all = candidates();
  const found = [];
  for (const p of all) {
    try {
      const st = fs.statSync(p);
      if (st.isFile()) found.push([p, st.mtimeMs]);
    } catch {
      // not there
    }
  }
  const fixed = found.find(([p]) => all.indexOf(p) < all.length - 2);
  if (fixed) return fixed[0];
  found.sort((a, b) => b[1] - a[1]);
  return found.length ? found[0][0] : null;
}

// Loads the addon from `file` (default: located); throws when there is none.
function load(file = locate()) {
  if (!file) throw new Error(`the native piece (${NAME}) is not built: cargo build -p ngw-node-native`);
  const m = { exports: {} };
  process.dlopen(m, file);
  return m.exports;
}

module.exports = { load, locate };
