//! End-to-end tests: real client binaries against real servers.
//!
//! Every scenario runs with our `ng` and with the reference C client `ng-nailgun`, as
//! `<module>::<scenario>::ours` and `<module>::<scenario>::c_client`, so a difference
//! between the two shows up side by side in one report. The first modules run against the
//! reference Nailgun 0.9.3 Java server (one shared instance per transport, plus private
//! ones for tests that kill it or need other settings). Scenario bodies are `pub fn`s
//! taking `&dyn Server`; the `ngd_*` modules run them, and `ngd`'s own scenarios, against
//! `ngd` (the real binary, and `ngd-testbed`, the same server with the test nails). The
//! harness is the `ng_tests` library (`tests/src/`).

// The harness itself: the Java server starts and answers, independent of any client.
mod harness;
// `ng-version`, compared byte for byte with the reference client.
mod version;
// Arguments, environment and working directory reach the nail intact.
mod header;
// Binary stdin round trips through the Echo nail, from pipes and files.
mod stdin;
// Exit codes pass through; `X` payloads parse like atoi.
mod exit;
// Long-running nails and heartbeats.
mod heartbeat;
// The client's own failures: 227, 230, 226.
mod failures;
// Symlinks named after nails, and the server named by the environment.
mod invocation;
// Our client's options where it fixes the reference client: filearg, -D, IPv6.
mod options;
// Against ngd: the client scenarios above, unchanged, on ngd-testbed and ngd.
mod ngd_compat;
// Against the ngd binary: built-ins, concurrency, killed clients, stopping.
mod ngd_builtins;
// Against ngd: other users are refused.
mod ngd_security;
// Against ngd: `ngd serve` with no --listen, and `ng` with no server named.
mod ngd_defaults;
// Plugins (Python ngw workers) on the ngd binary, with both clients.
mod plugins;
// Plugin fault injection (crashing, lying, hanging, flooding workers) and kill -9 of ngd.
mod faults;
// Hostile clients (every bad input, floods, slow and silent clients) against the ngd binary.
mod hostile;
// The soak, bounded: a mixed load with killed clients leaves no descriptor or process behind.
mod soak;
// The plugin host: protocol = "..." tables, bridges, mux and notices on the ngd binary.
mod plugins_host;
// Plugin commands: stdin sent before the worker asks for it (eager clients) arrives intact.
mod plugins_stdin;
// The JVM worker: Nailgun nails through ngw-java, side by side with the reference server.
mod jvm;
// Zero-setup operation: auto-start, idle exit, socket activation, ngd bench/check, completions.
mod ops;
// Two installs of different versions: the older server hands over to the newer ngd, once.
mod handover;
// Our ng's negotiated extensions against the Java server: announced harmlessly, classic.
mod extensions;
// Terminal scenarios in a pseudo-terminal: cold runs, and ng in a terminal against ngd.
mod terminal;
// Exact sessions against ngd: the client's own descriptors, forwarded signals, windows.
mod exact;
// The worker conformance suite: every behaviour on every path, for each worker.
mod conformance;
// One command makes a program warm: ngd warm/unwarm/list/shims, the SDK ngd carries.
mod warm;
// JVM launchers that run java by its path: learned by watching their execs, in each project.
mod warm_launchers;
// Shims run what the shell would run: warm, in a derived pool, or directly.
mod shims;
// The Ruby worker (sdk/ruby): rubocop, rake and a script of our own, warm as cold.
mod ruby;
// The Node worker (sdk/node): eslint, prettier, tsc and a script of our own, warm as cold.
mod node;
// `ngd warm eslint`: a Node program warm through the shims and the Node worker ngd carries.
mod node_warm;
