//! What a header holds, and how big it gets.

use ng_testkit::{frame, frames, Head};

use crate::hostile::attempt::{empty_args, payloads, zeros, Attempt};
use crate::hostile::response::Seen;

/// `env-without-=`: `E` entries without `=`, with an empty name, empty, with two `=`.
pub(in crate::hostile) fn env_without_equals(a: &Attempt<'_>) -> Seen {
    a.send_then_judge(&frames(&[
        (b'E', b"NOEQUALS"),
        (b'E', b"=value"),
        (b'E', b""),
        (b'E', b"A=B=C"),
        (b'A', b"arg"),
        (b'C', b"ng-true"),
    ]))
}

/// `non-utf8-header`: non-UTF-8 arguments, environment names and values, and directory.
pub(in crate::hostile) fn non_utf8_header(a: &Attempt<'_>) -> Seen {
    a.send_then_judge(&frames(&[
        (b'A', b"\xff\xfe\xfd"),
        (b'A', b"caf\xe9"),
        (b'A', b"\xc0\xaf"),
        (b'E', b"\xff\xfe=\xc0\xaf"),
        (b'E', b"LANG=\xed\xa0\x80"),
        (b'D', b"/tmp/\xff\xfe"),
        (b'C', b"ng-true"),
    ]))
}

/// `non-utf8-command`: a command name that is not UTF-8.
pub(in crate::hostile) fn non_utf8_command(a: &Attempt<'_>) -> Seen {
    a.send_then_judge(&frames(&[(b'A', b"x"), (b'C', b"ng-\xff\xfe\xc0")]))
}

/// `args-100k`: 100 000 `A` chunks, then `C ng-true`.
pub(in crate::hostile) fn args_100k(a: &Attempt<'_>) -> Seen {
    let payload = payloads().args_100k.as_slice();
    a.send_big_then_judge(&[payload, &frame(b'C', b"ng-true")])
}

/// `header-too-large`: just over `max_header_bytes`, as many empty arguments (each
/// charged its bookkeeping) or as a few arguments of half the cap.
pub(in crate::hostile) fn header_too_large(a: &Attempt<'_>) -> Seen {
    let max = a.limits.max_header_bytes;
    if a.index % 2 == 0 {
        let data = empty_args(max / 16 + 1);
        return a.send_big_then_judge(&[data, &frame(b'C', b"ng-true")]);
    }
    // Arguments of half the cap each, plus bookkeeping: just over.
    let half = (max / 2).min(u64::from(a.limits.max_chunk_bytes)) as u32;
    let n = max / u64::from(half.max(1)) + 1;
    let head = Head::encode(half, b'A');
    let body = zeros(half as usize);
    let mut parts: Vec<&[u8]> = Vec::new();
    for _ in 0..n {
        parts.push(&head);
        parts.push(body);
    }
    let c = frame(b'C', b"ng-true");
    parts.push(&c);
    a.send_big_then_judge(&parts)
}

/// `arg-64MiB`: one `A` of 64 MiB, over the chunk cap, all of it sent.
pub(in crate::hostile) fn arg_64mib(a: &Attempt<'_>) -> Seen {
    let head = Head::encode(64 << 20, b'A');
    let block = zeros(1 << 20);
    let mut parts: Vec<&[u8]> = vec![&head];
    parts.extend(std::iter::repeat_n(block, 64));
    a.send_big_then_judge(&parts)
}

/// `no-command`: `A`, `E`, `D`, and never a `C`.
pub(in crate::hostile) fn no_command(a: &Attempt<'_>) -> Seen {
    a.send_then_judge(&frames(&[
        (b'A', b"arg"),
        (b'E', b"NAME=value"),
        (b'D', b"/"),
    ]))
}
