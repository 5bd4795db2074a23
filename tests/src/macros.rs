//! Assertions with readable failures, and the two-client test macro.
//!
//! * [`eqnice!`](crate::eqnice): compares text and prints both sides in fenced blocks
//!   plus the first differing line (ripgrep's `eqnice!`).
//! * [`assert_bytes_eq!`](crate::assert_bytes_eq): compares binary data and prints the
//!   lengths and a hex window around the first difference, never a megabyte of bytes.
//! * [`both_clients!`](crate::both_clients): turns one scenario into a module with two
//!   tests, `ours` and `c_client`, so a difference between our client and the reference
//!   one shows up side by side in one test report.

use std::fmt::Write as _;

/// Asserts that two strings are equal, showing both in full on failure.
///
/// `eqnice!(expected, got)` or `eqnice!(expected, got, "context {}", x)`.
#[macro_export]
macro_rules! eqnice {
    ($expected:expr, $got:expr $(,)?) => {
        $crate::macros::eqnice_impl(::std::convert::AsRef::<str>::as_ref(&$expected),
            ::std::convert::AsRef::<str>::as_ref(&$got), ::std::string::String::new())
    };
    ($expected:expr, $got:expr, $($context:tt)+) => {
        $crate::macros::eqnice_impl(::std::convert::AsRef::<str>::as_ref(&$expected),
            ::std::convert::AsRef::<str>::as_ref(&$got), ::std::format!($($context)+))
    };
}

/// Asserts that two byte strings are equal, showing where they first differ on failure.
///
/// `assert_bytes_eq!(expected, got)` or `assert_bytes_eq!(expected, got, "context")`.
#[macro_export]
macro_rules! assert_bytes_eq {
    ($expected:expr, $got:expr $(,)?) => {
        $crate::macros::bytes_eq_impl(::std::convert::AsRef::<[u8]>::as_ref(&$expected),
            ::std::convert::AsRef::<[u8]>::as_ref(&$got), ::std::string::String::new())
    };
    ($expected:expr, $got:expr, $($context:tt)+) => {
        $crate::macros::bytes_eq_impl(::std::convert::AsRef::<[u8]>::as_ref(&$expected),
            ::std::convert::AsRef::<[u8]>::as_ref(&$got), ::std::format!($($context)+))
    };
}

/// Defines a scenario run once with each client.
///
/// ```no_run
/// use ng_tests::both_clients;
///
/// both_clients! {
///     /// Exit codes pass through.
///     fn exit_codes(client) {
///         client.cmd().arg("...").run().assert_code(42);
///     }
/// }
/// # fn main() {}
/// ```
///
/// expands to a module `exit_codes` with the tests `exit_codes::ours` and
/// `exit_codes::c_client`. The body sees the enclosing module's items and gets `client`,
/// a [`Client`](crate::Client).
#[macro_export]
macro_rules! both_clients {
    ($(#[$meta:meta])* fn $name:ident($client:ident) $body:block) => {
        $(#[$meta])*
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            fn scenario($client: $crate::Client) $body

            #[test]
            fn ours() {
                scenario($crate::Client::Ours)
            }

            #[test]
            fn c_client() {
                scenario($crate::Client::CClient)
            }
        }
    };
}

/// The body of [`eqnice!`](crate::eqnice).
#[track_caller]
pub fn eqnice_impl(expected: &str, got: &str, context: String) {
    if expected == got {
        return;
    }
    let mut message = String::new();
    if !context.is_empty() {
        let _ = writeln!(message, "{context}");
    }
    let _ = write!(
        message,
        "\nexpected:\n```\n{expected}\n```\n\ngot:\n```\n{got}\n```\n"
    );
    let line = expected
        .split_inclusive('\n')
        .zip(got.split_inclusive('\n'))
        .position(|(e, g)| e != g)
        .unwrap_or_else(|| expected.lines().count().min(got.lines().count()));
    let _ = write!(
        message,
        "first difference at line {}: expected {:?}, got {:?}",
        line + 1,
        expected.split_inclusive('\n').nth(line).unwrap_or("<end>"),
        got.split_inclusive('\n').nth(line).unwrap_or("<end>"),
    );
    panic!("{message}");
}

/// The body of [`assert_bytes_eq!`](crate::assert_bytes_eq).
#[track_caller]
pub fn bytes_eq_impl(expected: &[u8], got: &[u8], context: String) {
    if expected == got {
        return;
    }
    let at = expected
        .iter()
        .zip(got)
        .position(|(e, g)| e != g)
        .unwrap_or(expected.len().min(got.len()));
    let window = |bytes: &[u8]| {
        let start = at.saturating_sub(16);
        let end = (at + 16).min(bytes.len());
        let hex: Vec<String> = bytes[start.min(end)..end]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        format!("[{start}..{end}] {}", hex.join(" "))
    };
    panic!(
        "{context}\nbyte strings differ: expected {} bytes, got {} bytes; first difference \
         at offset {at}\nexpected {}\ngot      {}",
        expected.len(),
        got.len(),
        window(expected),
        window(got),
    );
}

#[cfg(test)]
mod tests {
    #[test]
    fn equal_values_pass() {
        crate::eqnice!("a\nb\n", String::from("a\nb\n"));
        crate::assert_bytes_eq!(b"abc", vec![b'a', b'b', b'c']);
    }

    #[test]
    #[should_panic(expected = "first difference at line 2")]
    fn eqnice_names_the_first_different_line() {
        crate::eqnice!("a\nb\nc\n", "a\nx\nc\n");
    }

    #[test]
    #[should_panic(expected = "first difference at offset 3")]
    fn bytes_eq_names_the_first_different_offset() {
        crate::assert_bytes_eq!(b"abcdef", b"abcxef", "context");
    }

    #[test]
    #[should_panic(expected = "expected 3 bytes, got 2 bytes")]
    fn bytes_eq_reports_a_short_result() {
        crate::assert_bytes_eq!(b"abc", b"ab");
    }
}
