//! Fuzz target: the chunk decoder on arbitrary bytes.
//!
//! Input: one byte choosing the [`Limits`] (default, 64, 0, or unlimited), then the bytes
//! to decode. Every `decode` call must take exactly one whole chunk, which re-encodes to the
//! bytes it took, or nothing; `bytes_needed` must agree; an error must leave the buffer as
//! it was and name the over-limit header at its front.

#![no_main]

#[path = "../../proto/tests/common/steps.rs"]
mod steps;

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use ng_proto::Limits;

fuzz_target!(|data: &[u8]| {
    let Some((&flags, bytes)) = data.split_first() else {
        return;
    };
    let max_chunk_len = match flags % 4 {
        0 => Limits::DEFAULT_MAX_CHUNK_LEN,
        1 => 64,
        2 => 0,
        _ => u32::MAX,
    };
    let limits = Limits { max_chunk_len };
    let mut buf = BytesMut::from(bytes);
    while let Ok(Some(_)) = steps::check_decode_once(limits, &mut buf) {}
});
