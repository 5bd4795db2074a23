//! Fuzz target: `ClientSession` driven by an arbitrary step program.
//!
//! The input is decoded by `decode_client_program` (a configuration byte, then steps: send
//! the header, server bytes or chunks, stdin, end of stdin, time passing, end of file) and
//! run through `ClientHarness`, which checks every step against its reference model and the
//! protocol invariants (no stdin without an unspent `S`, nothing but `H` after `.`, the
//! first `X` wins, output streamed exactly, heartbeats on time).

#![no_main]

#[path = "../../proto/tests/common/steps.rs"]
mod steps;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (config, program) = steps::decode_client_program(data);
    steps::ClientHarness::run(config, &program);
});
