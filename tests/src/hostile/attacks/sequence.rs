//! Chunk types where they do not belong, and stdin out of turn.

use ng_testkit::{frame, frames};

use crate::hostile::attempt::Attempt;
use crate::hostile::response::{classify, Seen};
use crate::hostile::Outcome;

/// `unknown-before-C`: unknown and server-only chunk types, with and without a payload,
/// before `C ng-true`.
pub(in crate::hostile) fn unknown_before_command(a: &Attempt<'_>) -> Seen {
    let mut bytes = Vec::new();
    for ty in [
        b'Z', 0x00, 0xFF, b'h', b'q', b'S', b'X', b'1', b'2', b'0', b'.',
    ] {
        bytes.extend(frame(ty, b"junk"));
        bytes.extend(frame(ty, b""));
    }
    bytes.extend(frame(b'C', b"ng-true"));
    a.send_then_judge(&bytes)
}

/// `unknown-after-C`: `C ng-cat`, then one chunk of a type a client may not send then.
pub(in crate::hostile) fn unknown_after_command(a: &Attempt<'_>) -> Seen {
    const TYPES: [u8; 12] = [
        b'Z', 0x00, 0xFF, b'h', b'S', b'X', b'1', b'A', b'E', b'D', b'C', b'L',
    ];
    let mut bytes = frame(b'C', b"ng-cat");
    bytes.extend(frame(TYPES[a.index % TYPES.len()], b"x=y"));
    a.send_then_judge(&bytes)
}

/// `stdin-before-S`: `C ng-cat`, two `0` and a `.` before any `S`; the bytes must come
/// back.
pub(in crate::hostile) fn stdin_before_credit(a: &Attempt<'_>) -> Seen {
    let bytes = frames(&[
        (b'C', b"ng-cat"),
        (b'0', b"hello, "),
        (b'0', b"world\n"),
        (b'.', b""),
    ]);
    match a.send_then_read(&bytes) {
        Err(seen) => seen,
        Ok(r) => {
            let seen = classify(&r);
            if seen.outcome == Outcome::Served(0) && r.stdout != b"hello, world\n" {
                Seen::now(
                    Outcome::Broken,
                    format!("ng-cat echoed {:?}", String::from_utf8_lossy(&r.stdout)),
                )
            } else {
                seen
            }
        }
    }
}

/// `stdin-after-eof`: `C ng-cat`, `.`, then a `0`.
pub(in crate::hostile) fn stdin_after_eof(a: &Attempt<'_>) -> Seen {
    a.send_then_judge(&frames(&[(b'C', b"ng-cat"), (b'.', b""), (b'0', b"late")]))
}
