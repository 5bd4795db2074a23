//! Deterministic test payloads.

/// `len` bytes that look random and hold every byte value, including the ones that
/// trip text handling (`\0`, `\n`, `\r`, `0xff`): xorshift64 from a fixed seed, so a
/// failure reproduces exactly.
pub fn binary(len: usize) -> Vec<u8> {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let take = (len - out.len()).min(8);
        out.extend_from_slice(&state.to_le_bytes()[..take]);
    }
    out
}

/// A mebibyte.
pub const MIB: usize = 1 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_is_deterministic_and_covers_every_byte() {
        let data = binary(64 * 1024);
        assert_eq!(data, binary(64 * 1024));
        assert_eq!(binary(10), data[..10]);
        let mut seen = [false; 256];
        for &b in &data {
            seen[usize::from(b)] = true;
        }
        assert!(seen.iter().all(|&s| s));
    }
}
