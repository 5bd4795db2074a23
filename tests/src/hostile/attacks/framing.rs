//! Chunk lengths and chunks cut short.

use ng_testkit::{frame, Head};

use crate::hostile::attempt::Attempt;
use crate::hostile::response::Seen;
use crate::hostile::Kind;

/// `length-2^31`, `length-2^32-1`: a chunk announcing a huge payload, as an `A` or an
/// unknown `Z` before `C`, or as stdin after `C ng-cat`.
pub(in crate::hostile) fn huge_length(a: &Attempt<'_>) -> Seen {
    let len = if a.kind == Kind::Length2p31 {
        1u32 << 31
    } else {
        u32::MAX
    };
    let mut bytes = Vec::new();
    let ty = match a.index % 3 {
        0 => b'A',
        1 => b'Z',
        _ => {
            bytes.extend(frame(b'C', b"ng-cat"));
            b'0'
        }
    };
    bytes.extend(Head::encode(len, ty));
    bytes.extend_from_slice(b"some payload");
    a.send_then_judge(&bytes)
}

/// `cut-mid-header`: an `A`, then 3 of the next chunk's 5 header bytes.
pub(in crate::hostile) fn cut_mid_header(a: &Attempt<'_>) -> Seen {
    let mut bytes = frame(b'A', b"hello");
    bytes.extend_from_slice(&Head::encode(100, b'A')[..3]);
    a.send_then_judge(&bytes)
}

/// `cut-mid-payload`: an `A`, then a chunk with 40 of its 100 payload bytes.
pub(in crate::hostile) fn cut_mid_payload(a: &Attempt<'_>) -> Seen {
    let mut bytes = frame(b'A', b"hello");
    bytes.extend_from_slice(&Head::encode(100, b'A'));
    bytes.extend_from_slice(&[b'x'; 40]);
    a.send_then_judge(&bytes)
}

/// `cut-mid-stdin`: `C ng-cat`, then a `0` chunk with 40 of its 100 bytes.
pub(in crate::hostile) fn cut_mid_stdin(a: &Attempt<'_>) -> Seen {
    let mut bytes = frame(b'C', b"ng-cat");
    bytes.extend_from_slice(&Head::encode(100, b'0'));
    bytes.extend_from_slice(&[b'x'; 40]);
    a.send_then_judge(&bytes)
}
