//! Fuzz target: `ServerSession` driven by an arbitrary step program.
//!
//! The input is decoded by `decode_server_program` (a configuration byte, then steps: client
//! bytes or chunks, `request_stdin`, writes, `exit`, time passing, end of file, partial
//! writes) and run through `ServerHarness`, which checks every step against its reference
//! model and the protocol invariants (one `Launch`, one outstanding `S` at most, exactly one
//! `X` and nothing after it, only `1 2 S X` sent, deadlines).

#![no_main]

#[path = "../../proto/tests/common/steps.rs"]
mod steps;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (config, program) = steps::decode_server_program(data);
    steps::ServerHarness::run(config, &program);
});
