//! The byte layer of the Nu plugin protocol, sans I/O: the encoding preamble a plugin writes
//! first (`\x04json` or `\x07msgpack`), and the framing of messages in either encoding.
//!
//! Messages are handled as [`J`]s in both encodings (msgpack maps have named
//! fields, exactly the JSON shapes). A [`Decoder`] is fed bytes as they arrive and yields
//! whole messages; it never holds more than its cap of undecoded bytes, and for msgpack it
//! checks every declared length against the cap before anything is allocated.

use crate::json::J;
use serde::Deserialize;

/// The default cap on one message (and on undecoded bytes): 64 MiB.
pub const DEFAULT_MAX_MESSAGE: usize = 64 * 1024 * 1024;

/// The encodings a plugin may choose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    /// JSON; the engine ends every message with a newline.
    Json,
    /// MessagePack; maps with named fields, no separators.
    MsgPack,
}

impl Encoding {
    /// The encoding's name, as the preamble spells it.
    pub fn name(self) -> &'static str {
        match self {
            Encoding::Json => "json",
            Encoding::MsgPack => "msgpack",
        }
    }

    /// Encodes one message.
    pub fn encode(self, msg: &J) -> Vec<u8> {
        match self {
            Encoding::Json => {
                let mut out = serde_json::to_vec(msg).unwrap_or_default();
                out.push(b'\n');
                out
            }
            Encoding::MsgPack => rmp_serde::to_vec_named(msg).unwrap_or_default(),
        }
    }
}

/// What the byte stream from a plugin can do wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    /// The first bytes are not a known encoding name.
    #[error(
        "the plugin did not start with its encoding (`\\x04json` or `\\x07msgpack`); it sent {0}"
    )]
    BadPreamble(String),
    /// Bytes that are not a message in the plugin's encoding.
    #[error("the plugin sent something that is not a {encoding} message: {detail}")]
    Garbage {
        /// The encoding in use.
        encoding: &'static str,
        /// What the parser said, with the first bytes.
        detail: String,
    },
    /// A message larger than the cap.
    #[error("the plugin sent a message larger than {cap} bytes")]
    Oversized {
        /// The cap in bytes.
        cap: usize,
    },
}

/// Reads the preamble from the first bytes: `Ok(None)` until enough have arrived, then the
/// encoding and how many bytes it took.
pub fn read_preamble(buf: &[u8]) -> Result<Option<(Encoding, usize)>, CodecError> {
    let Some(&len) = buf.first() else {
        return Ok(None);
    };
    let len = usize::from(len);
    let known = [
        (b"json".as_slice(), Encoding::Json),
        (b"msgpack", Encoding::MsgPack),
    ];
    if !known.iter().any(|(name, _)| name.len() == len) {
        return Err(CodecError::BadPreamble(show(&buf[..buf.len().min(32)])));
    }
    if buf.len() < 1 + len {
        let have = &buf[1..];
        if known.iter().any(|(name, _)| name.starts_with(have)) {
            return Ok(None);
        }
        return Err(CodecError::BadPreamble(show(buf)));
    }
    let name = &buf[1..1 + len];
    match known.iter().find(|(n, _)| *n == name) {
        Some((_, enc)) => Ok(Some((*enc, 1 + len))),
        None => Err(CodecError::BadPreamble(show(&buf[..1 + len]))),
    }
}

/// Shows bytes for an error message: printable ASCII as is, the rest escaped.
pub fn show(bytes: &[u8]) -> String {
    let mut s = String::from("\"");
    for &b in bytes.iter().take(64) {
        s.extend(std::ascii::escape_default(b).map(char::from));
    }
    if bytes.len() > 64 {
        s.push_str("...");
    }
    s.push('"');
    s
}

/// Splits a plugin's byte stream into messages.
#[derive(Debug)]
pub struct Decoder {
    encoding: Encoding,
    buf: Vec<u8>,
    cap: usize,
    /// For JSON: whether bytes that may end a message arrived since the last attempt.
    maybe_complete: bool,
    /// For msgpack: how far the message at the front has been scanned.
    scan: Extent,
}

impl Decoder {
    /// A decoder for `encoding` holding at most `cap` undecoded bytes.
    pub fn new(encoding: Encoding, cap: usize) -> Self {
        Self {
            encoding,
            buf: Vec::new(),
            cap,
            maybe_complete: false,
            scan: Extent::new(),
        }
    }

    /// The encoding.
    pub fn encoding(&self) -> Encoding {
        self.encoding
    }

    /// Adds bytes read from the plugin.
    pub fn feed(&mut self, bytes: &[u8]) {
        if self.encoding == Encoding::Json {
            // The engine's own messages end with a newline; a message without one is still
            // tried whenever its last byte could close it.
            let last = bytes.iter().rev().find(|b| !b.is_ascii_whitespace());
            self.maybe_complete |= bytes.contains(&b'\n') || matches!(last, Some(b'}' | b'"'));
        }
        self.buf.extend_from_slice(bytes);
    }

    /// Undecoded bytes held.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// The next whole message, `Ok(None)` when more bytes are needed.
    pub fn next_message(&mut self) -> Result<Option<J>, CodecError> {
        match self.encoding {
            Encoding::Json => self.next_json(),
            Encoding::MsgPack => self.next_msgpack(),
        }
    }

    fn next_json(&mut self) -> Result<Option<J>, CodecError> {
        let start = self
            .buf
            .iter()
            .position(|b| !b.is_ascii_whitespace())
            .unwrap_or(self.buf.len());
        if start > 0 {
            self.buf.drain(..start);
        }
        if self.buf.is_empty() {
            self.maybe_complete = false;
            return Ok(None);
        }
        if !self.maybe_complete {
            return self.check_cap();
        }
        let mut stream = serde_json::Deserializer::from_slice(&self.buf).into_iter::<J>();
        match stream.next() {
            Some(Ok(v)) => {
                let end = stream.byte_offset();
                if end > self.cap {
                    return Err(CodecError::Oversized { cap: self.cap });
                }
                self.buf.drain(..end);
                Ok(Some(v))
            }
            Some(Err(e)) if e.is_eof() => {
                self.maybe_complete = false;
                self.check_cap()
            }
            Some(Err(e)) => Err(CodecError::Garbage {
                encoding: "json",
                detail: format!("{e} (bytes {})", show(&self.buf)),
            }),
            None => Ok(None),
        }
    }

    fn check_cap(&self) -> Result<Option<J>, CodecError> {
        if self.buf.len() > self.cap {
            Err(CodecError::Oversized { cap: self.cap })
        } else {
            Ok(None)
        }
    }

    fn next_msgpack(&mut self) -> Result<Option<J>, CodecError> {
        if self.buf.is_empty() {
            return Ok(None);
        }
        // The scan resumes where the last feed left it, so a message that arrives in many
        // reads is scanned once.
        let Some(end) = self.scan.scan(&self.buf, self.cap)? else {
            return self.check_cap();
        };
        self.scan = Extent::new();
        let value = decode_msgpack(&self.buf[..end])?;
        self.buf.drain(..end);
        Ok(Some(value))
    }
}

/// Decodes one msgpack message; `bin` becomes an array of byte values, as in JSON.
pub fn decode_msgpack(bytes: &[u8]) -> Result<J, CodecError> {
    let mut de = rmp_serde::Deserializer::from_read_ref(bytes);
    J::deserialize(&mut de).map_err(|e| CodecError::Garbage {
        encoding: "msgpack",
        detail: format!("{e} (bytes {})", show(bytes)),
    })
}

/// Finds where the msgpack value starting at `buf[0]` ends without decoding it: `Ok(None)`
/// when it is incomplete; an error when a declared length exceeds `cap` or a byte is not
/// msgpack.
pub fn msgpack_extent(buf: &[u8], cap: usize) -> Result<Option<usize>, CodecError> {
    Extent::new().scan(buf, cap)
}

/// An incremental [`msgpack_extent`]: where the scan of one value stopped (the start of
/// the first item not yet complete, and how many items are still to come).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    pos: usize,
    pending: u64,
}

impl Default for Extent {
    fn default() -> Self {
        Self::new()
    }
}

impl Extent {
    /// A scan at the start of a value.
    pub fn new() -> Self {
        Self { pos: 0, pending: 1 }
    }

    /// Scans on from where the last call stopped; `buf` is the same buffer with more
    /// bytes at its end.
    pub fn scan(&mut self, buf: &[u8], cap: usize) -> Result<Option<usize>, CodecError> {
        let mut pos = self.pos;
        let mut pending = self.pending;
        let oversized = || CodecError::Oversized { cap };
        while pending > 0 {
            let (item_pos, item_pending) = (pos, pending);
            let Some(&b) = buf.get(pos) else {
                self.pos = item_pos;
                self.pending = item_pending;
                return Ok(None);
            };
            pending -= 1;
            pos += 1;
            let need = |n: usize| -> Option<u64> {
                buf.get(pos..pos + n)
                    .map(|s| s.iter().fold(0u64, |acc, &x| (acc << 8) | u64::from(x)))
            };
            // (payload bytes to skip, items that follow)
            let (skip, items): (u64, u64) = match b {
                0x00..=0x7f | 0xe0..=0xff | 0xc0 | 0xc2 | 0xc3 => (0, 0),
                0x80..=0x8f => (0, u64::from(b & 0x0f) * 2),
                0x90..=0x9f => (0, u64::from(b & 0x0f)),
                0xa0..=0xbf => (u64::from(b & 0x1f), 0),
                0xcc | 0xd0 => (1, 0),
                0xcd | 0xd1 => (2, 0),
                0xca | 0xce | 0xd2 => (4, 0),
                0xcb | 0xcf | 0xd3 => (8, 0),
                0xd4 => (2, 0),
                0xd5 => (3, 0),
                0xd6 => (5, 0),
                0xd7 => (9, 0),
                0xd8 => (17, 0),
                0xc4 | 0xd9 | 0xc5 | 0xda | 0xc6 | 0xdb | 0xc7 | 0xc8 | 0xc9 => {
                    let width = match b {
                        0xc4 | 0xd9 | 0xc7 => 1,
                        0xc5 | 0xda | 0xc8 => 2,
                        _ => 4,
                    };
                    let Some(len) = need(width) else {
                        self.pos = item_pos;
                        self.pending = item_pending;
                        return Ok(None);
                    };
                    pos += width;
                    let ext = u64::from(matches!(b, 0xc7..=0xc9));
                    (len + ext, 0)
                }
                0xdc..=0xdf => {
                    let width = if matches!(b, 0xdc | 0xde) { 2 } else { 4 };
                    let Some(len) = need(width) else {
                        self.pos = item_pos;
                        self.pending = item_pending;
                        return Ok(None);
                    };
                    pos += width;
                    (0, if b >= 0xde { len * 2 } else { len })
                }
                0xc1 => {
                    return Err(CodecError::Garbage {
                        encoding: "msgpack",
                        detail: format!("byte 0xc1 is never used (bytes {})", show(buf)),
                    })
                }
            };
            if skip > cap as u64 || items > cap as u64 {
                return Err(oversized());
            }
            pos += skip as usize;
            if pos > cap {
                return Err(oversized());
            }
            pending += items;
        }
        // A payload may reach past the bytes held: the scan waits at its end.
        self.pos = pos;
        self.pending = 0;
        if pos > buf.len() {
            return Ok(None);
        }
        Ok(Some(pos))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::obj;

    fn j(text: &str) -> J {
        J::parse(text.as_bytes()).unwrap()
    }

    #[test]
    fn preambles() {
        assert_eq!(read_preamble(b""), Ok(None));
        assert_eq!(read_preamble(b"\x04js"), Ok(None));
        assert_eq!(read_preamble(b"\x04json{"), Ok(Some((Encoding::Json, 5))));
        assert_eq!(
            read_preamble(b"\x07msgpack"),
            Ok(Some((Encoding::MsgPack, 8)))
        );
        assert!(matches!(
            read_preamble(b"hello"),
            Err(CodecError::BadPreamble(_))
        ));
        assert!(matches!(
            read_preamble(b"\x04jsxn"),
            Err(CodecError::BadPreamble(_))
        ));
    }

    #[test]
    fn json_messages_split_across_feeds() {
        let mut d = Decoder::new(Encoding::Json, 1024);
        d.feed(br#"{"Hello":{"protocol":"nu-plugin","#);
        assert_eq!(d.next_message(), Ok(None));
        d.feed(b"\"version\":\"0.115.1\",\"features\":[]}}\n\"Goodbye\"\n");
        let hello = d.next_message().unwrap().unwrap();
        assert_eq!(hello["Hello"]["version"], "0.115.1");
        assert_eq!(d.next_message(), Ok(Some(J::from("Goodbye"))));
        assert_eq!(d.next_message(), Ok(None));
    }

    #[test]
    fn json_garbage_and_oversize() {
        let mut d = Decoder::new(Encoding::Json, 1024);
        d.feed(b"this is not json\n");
        assert!(matches!(d.next_message(), Err(CodecError::Garbage { .. })));
        let mut d = Decoder::new(Encoding::Json, 16);
        d.feed(br#"{"Data":[0,{"List":"aaaaaaaaaaaaaaaaaa"#);
        assert_eq!(d.next_message(), Err(CodecError::Oversized { cap: 16 }));
    }

    #[test]
    fn msgpack_hello_bytes_from_the_protocol_text() {
        // The msgpack Hello the protocol reference spells out byte by byte.
        let msg = j(r#"{"Hello": {"protocol": "nu-plugin", "version": "0.94.0", "features": []}}"#);
        let mut expected = vec![0x81, 0xa5];
        expected.extend_from_slice(b"Hello");
        expected.push(0x83);
        for (k, v) in [("protocol", "nu-plugin"), ("version", "0.94.0")] {
            expected.push(0xa0 | k.len() as u8);
            expected.extend_from_slice(k.as_bytes());
            expected.push(0xa0 | v.len() as u8);
            expected.extend_from_slice(v.as_bytes());
        }
        expected.push(0xa8);
        expected.extend_from_slice(b"features");
        expected.push(0x90);
        assert_eq!(Encoding::MsgPack.encode(&msg), expected);
        let mut d = Decoder::new(Encoding::MsgPack, 1024);
        d.feed(&expected[..10]);
        assert_eq!(d.next_message(), Ok(None));
        d.feed(&expected[10..]);
        assert_eq!(d.next_message(), Ok(Some(msg)));
    }

    #[test]
    fn msgpack_bin_stays_one_buffer_and_reads_as_json_bytes_do() {
        // {"Raw": {"Ok": bin8 "ab"}}
        let bytes = [
            0x81, 0xa3, b'R', b'a', b'w', 0x81, 0xa2, b'O', b'k', 0xc4, 2, b'a', b'b',
        ];
        assert_eq!(msgpack_extent(&bytes, 1024), Ok(Some(bytes.len())));
        let v = decode_msgpack(&bytes).unwrap();
        assert_eq!(v, obj! {"Raw" => obj! {"Ok" => J::Bytes(b"ab".to_vec())}});
        let from_json = j(r#"{"Raw": {"Ok": [97, 98]}}"#);
        assert_eq!(
            crate::msg::bytes_of(&v["Raw"]["Ok"]),
            crate::msg::bytes_of(&from_json["Raw"]["Ok"])
        );
        assert_eq!(v.to_json(), from_json.to_json());
    }

    #[test]
    fn msgpack_declared_length_over_cap_is_refused_before_allocating() {
        // str32 claiming 4 GiB.
        let bytes = [0xdb, 0xff, 0xff, 0xff, 0xff, b'x'];
        assert_eq!(
            msgpack_extent(&bytes, 1 << 20),
            Err(CodecError::Oversized { cap: 1 << 20 })
        );
        // array32 claiming 4 G items.
        let bytes = [0xdd, 0xff, 0xff, 0xff, 0xff];
        assert_eq!(
            msgpack_extent(&bytes, 1 << 20),
            Err(CodecError::Oversized { cap: 1 << 20 })
        );
        let mut d = Decoder::new(Encoding::MsgPack, 1 << 20);
        d.feed(&[0xc1]);
        assert!(matches!(d.next_message(), Err(CodecError::Garbage { .. })));
    }

    #[test]
    fn raw_data_is_a_bin_in_msgpack_and_numbers_in_json() {
        let d = crate::msg::data(0, &crate::msg::StreamData::Raw(b"ab".to_vec()));
        assert_eq!(
            Encoding::Json.encode(&d),
            b"{\"Data\":[0,{\"Raw\":{\"Ok\":[97,98]}}]}\n"
        );
        let m = Encoding::MsgPack.encode(&d);
        assert!(m.ends_with(&[0xc4, 2, b'a', b'b']), "{m:?}");
        assert_eq!(decode_msgpack(&m), Ok(d));
    }

    #[test]
    fn msgpack_round_trip_of_a_call() {
        let msg = j(
            r#"{"Call": [2, {"Run": {"name": "from ini", "call": {"head": {"start": 0, "end": 8}, "positional": [], "named": []}, "input": {"ByteStream": {"id": 0, "span": {"start": 0, "end": 0}, "type": "Unknown", "metadata": null}}}}]}"#,
        );
        let bytes = Encoding::MsgPack.encode(&msg);
        assert_eq!(msgpack_extent(&bytes, 1 << 20), Ok(Some(bytes.len())));
        for cut in 0..bytes.len() {
            assert_eq!(
                msgpack_extent(&bytes[..cut], 1 << 20),
                Ok(None),
                "cut {cut}"
            );
        }
        assert_eq!(decode_msgpack(&bytes), Ok(msg.clone()));
        // One scan resumed over growing prefixes finds the same end.
        let mut e = Extent::new();
        for cut in 0..bytes.len() {
            assert_eq!(e.scan(&bytes[..cut], 1 << 20), Ok(None), "cut {cut}");
        }
        assert_eq!(e.scan(&bytes, 1 << 20), Ok(Some(bytes.len())));
        let mut d = Decoder::new(Encoding::MsgPack, 1 << 20);
        for (i, b) in bytes.iter().enumerate() {
            d.feed(std::slice::from_ref(b));
            if i + 1 < bytes.len() {
                assert_eq!(d.next_message(), Ok(None));
            }
        }
        d.feed(&bytes);
        assert_eq!(d.next_message(), Ok(Some(msg.clone())));
        assert_eq!(d.next_message(), Ok(Some(msg)));
        assert_eq!(d.next_message(), Ok(None));
    }
}
