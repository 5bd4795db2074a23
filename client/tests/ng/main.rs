//! Binary tests of `ng` against fake servers written with `std::net` and
//! `std::os::unix::net`: the exact bytes it sends, exit codes, stdin credit, output,
//! heartbeats, transports and the command line.
//!
//! End-to-end tests against the reference Java server live in the workspace's `tests/`.

mod cli;
mod exit_codes;
mod extensions;
mod header;
mod output;
mod stdin;
mod transport;
mod util;
