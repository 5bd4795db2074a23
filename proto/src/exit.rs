//! The `X` chunk's payload: the exit code as ASCII decimal.
//!
//! Servers send exactly one `X` with `"<n>\n"`, which is what the reference Java server sends
//! on modern JDKs, byte for byte. Clients parse like C's `atoi` (the reference C client does):
//! skip leading whitespace, take an optional sign and the digits up to the first non-digit;
//! anything else, including an empty payload, is 0. The process exit status is then the low
//! eight bits, as `exit(3)` would keep them.

use std::io::Write as _;

/// Formats an exit code as the `X` payload, `"<n>\n"`.
pub fn format(code: i32) -> Vec<u8> {
    let mut out = Vec::with_capacity(12);
    // Writing to a Vec cannot fail.
    let _ = writeln!(out, "{code}");
    out
}

/// Parses an `X` payload the way the reference C client's `atoi` does.
///
/// Overflow wraps (glibc's `atoi` is `(int) strtol(..)`, which keeps the low 32 bits on
/// LP64), so the low eight bits always match what the C client would exit with.
pub fn parse(payload: &[u8]) -> i32 {
    let mut rest = payload;
    while let [b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r', tail @ ..] = rest {
        rest = tail;
    }
    let negative = match rest {
        [b'-', tail @ ..] => {
            rest = tail;
            true
        }
        [b'+', tail @ ..] => {
            rest = tail;
            false
        }
        _ => false,
    };
    let mut magnitude: i128 = 0;
    for &b in rest {
        if !b.is_ascii_digit() {
            break;
        }
        // Cap well above the i64 range; strtol saturates there anyway.
        magnitude = (magnitude * 10 + i128::from(b - b'0')).min(1 << 70);
    }
    let signed = if negative { -magnitude } else { magnitude };
    // strtol saturates at LONG_MIN/LONG_MAX; the cast to int then keeps the low 32 bits.
    let value = signed.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64;
    value as i32
}

/// The process exit status a client reports for a parsed exit code: `code & 0xFF`.
pub fn status(code: i32) -> u8 {
    (code & 0xFF) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_matches_the_jdk17_reference() {
        assert_eq!(format(0), b"0\n");
        assert_eq!(format(-1), b"-1\n");
        assert_eq!(format(898), b"898\n");
    }

    #[test]
    fn parse_is_atoi() {
        assert_eq!(parse(b""), 0);
        assert_eq!(parse(b" 7x"), 7);
        assert_eq!(parse(b"42"), 42);
        assert_eq!(parse(b"0\n"), 0);
        assert_eq!(parse(b"\t-1\r\n"), -1);
        assert_eq!(parse(b"+5"), 5);
        assert_eq!(parse(b"x5"), 0);
        assert_eq!(parse(b"- 5"), 0);
    }

    #[test]
    fn status_keeps_the_low_eight_bits() {
        assert_eq!(status(898), 130);
        assert_eq!(status(899), 131);
        assert_eq!(status(-1), 255);
        assert_eq!(status(300), 44);
        assert_eq!(status(parse(b"99999999999999999999")), 255);
        assert_eq!(status(parse(b"-99999999999999999999")), 0);
    }
}
