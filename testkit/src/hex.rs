//! Hex strings to bytes and back, for fixtures and nails that print raw bytes as hex and
//! for captures kept as hex text.

/// Lower-case hex of `bytes`.
pub fn encode(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The bytes of a hex string (either case); `None` if it is not hex.
pub fn decode(text: &str) -> Option<Vec<u8>> {
    if text.len() % 2 != 0 || !text.is_ascii() {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok())
        .collect()
}

/// The bytes of hex text laid out for people: white space anywhere, and `#` comments to
/// the end of a line. Panics on anything else.
#[track_caller]
pub fn decode_text(text: &str) -> Vec<u8> {
    let digits: String = text
        .lines()
        .flat_map(|line| line.split('#').next().unwrap_or("").chars())
        .filter(|c| !c.is_whitespace())
        .collect();
    decode(&digits).unwrap_or_else(|| panic!("not hex: {text:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        assert_eq!(encode(b"\x00\xffab"), "00ff6162");
        assert_eq!(decode("00FF6162"), Some(b"\x00\xffab".to_vec()));
        assert_eq!(decode("0"), None);
        assert_eq!(decode("zz"), None);
        assert_eq!(decode_text("00 01 # a comment\n  0a\n"), [0, 1, 10]);
    }
}
