//! Framing of JSON-RPC messages on a plugin's stdout and stdin, sans I/O.
//!
//! Two framings exist: `ndjson` (one JSON object per line, as nexo's SDK and MCP stdio
//! servers write) and `content-length` (LSP-style `Content-Length: N\r\n\r\n` headers, as
//! StreamNook's protocol freezes). The [`Decoder`] is fed bytes as they arrive and yields
//! [`Frame`]s. Its buffer is bounded: a frame whose length is over the cap is refused before
//! its body is buffered, and skipped to its end, while an [`IdScanner`] watches the skipped
//! bytes for the top-level `"id"` so the caller can fail the one call it answered.

use std::fmt;

/// How messages are delimited on the pipe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// One JSON value per `\n`-terminated line.
    Ndjson,
    /// `Content-Length: N` header block, blank line, N bytes of JSON.
    ContentLength,
}

impl Framing {
    /// Parses the configuration value (`"ndjson"` or `"content-length"`).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "ndjson" => Some(Self::Ndjson),
            "content-length" => Some(Self::ContentLength),
            _ => None,
        }
    }

    /// Frames one encoded JSON message.
    pub fn encode(self, json: &[u8]) -> Vec<u8> {
        match self {
            Self::Ndjson => {
                let mut out = Vec::with_capacity(json.len() + 1);
                out.extend_from_slice(json);
                out.push(b'\n');
                out
            }
            Self::ContentLength => {
                let mut out = format!("Content-Length: {}\r\n\r\n", json.len()).into_bytes();
                out.extend_from_slice(json);
                out
            }
        }
    }

    /// The size of the framed message for a JSON body of `len` bytes.
    pub fn framed_len(self, len: usize) -> usize {
        match self {
            Self::Ndjson => len + 1,
            Self::ContentLength => len + format!("Content-Length: {len}\r\n\r\n").len(),
        }
    }
}

impl fmt::Display for Framing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Ndjson => "ndjson",
            Self::ContentLength => "content-length",
        })
    }
}

/// What the decoder found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    /// A complete message body (not yet parsed as JSON).
    Message(Vec<u8>),
    /// A frame over the cap was skipped; `id` is its top-level `"id"` when one was seen.
    Oversized {
        /// The frame's length (known up front with content-length, counted for ndjson).
        len: usize,
        /// The raw JSON text of its top-level `id` member, if any.
        id: Option<String>,
    },
    /// Bytes that are not a frame (stray output, a broken header), skipped.
    Garbage(String),
}

#[derive(Clone, Debug)]
enum State {
    /// Collecting a line (ndjson) or a header block (content-length).
    Head,
    /// Content-length: the header said `remaining` more body bytes follow.
    Body { len: usize },
    /// Skipping an oversized frame: `remaining` bytes for content-length, or up to the next
    /// newline for ndjson (`remaining` is `None`).
    Skip {
        len: usize,
        remaining: Option<usize>,
        scanner: IdScanner,
    },
}

/// An incremental decoder with a bounded buffer.
#[derive(Debug)]
pub struct Decoder {
    framing: Framing,
    cap: usize,
    buf: Vec<u8>,
    state: State,
}

/// The longest header block accepted in content-length framing.
const MAX_HEADER: usize = 8 * 1024;

impl Decoder {
    /// A decoder refusing frames over `cap` bytes.
    pub fn new(framing: Framing, cap: usize) -> Self {
        Self {
            framing,
            cap,
            buf: Vec::new(),
            state: State::Head,
        }
    }

    /// Adds bytes read from the pipe and returns every frame they complete.
    pub fn feed(&mut self, mut data: &[u8]) -> Vec<Frame> {
        let mut out = Vec::new();
        while !data.is_empty() {
            let used = self.step(data, &mut out);
            data = &data[used..];
        }
        out
    }

    /// Whether a partial frame is buffered (for the log when the pipe closes).
    pub fn has_partial(&self) -> bool {
        !self.buf.is_empty() || !matches!(self.state, State::Head)
    }

    /// Consumes a prefix of `data`, returning how much it used.
    fn step(&mut self, data: &[u8], out: &mut Vec<Frame>) -> usize {
        match &mut self.state {
            State::Skip {
                len,
                remaining,
                scanner,
            } => match remaining {
                Some(rem) => {
                    let n = (*rem).min(data.len());
                    scanner.feed(&data[..n]);
                    *rem -= n;
                    if *rem == 0 {
                        out.push(Frame::Oversized {
                            len: *len,
                            id: scanner.id(),
                        });
                        self.state = State::Head;
                    }
                    n
                }
                None => match data.iter().position(|&b| b == b'\n') {
                    Some(i) => {
                        scanner.feed(&data[..i]);
                        out.push(Frame::Oversized {
                            len: *len + i,
                            id: scanner.id(),
                        });
                        self.state = State::Head;
                        i + 1
                    }
                    None => {
                        scanner.feed(data);
                        *len += data.len();
                        data.len()
                    }
                },
            },
            State::Body { len } => {
                let need = *len - self.buf.len();
                let n = need.min(data.len());
                self.buf.extend_from_slice(&data[..n]);
                if self.buf.len() == *len {
                    out.push(Frame::Message(std::mem::take(&mut self.buf)));
                    self.state = State::Head;
                }
                n
            }
            State::Head => {
                let limit = match self.framing {
                    Framing::Ndjson => self.cap,
                    Framing::ContentLength => MAX_HEADER,
                };
                match data.iter().position(|&b| b == b'\n') {
                    Some(i) if self.buf.len() + i <= limit + 1 => {
                        self.buf.extend_from_slice(&data[..=i]);
                        if let Some(frame) = self.on_head_line() {
                            out.push(frame);
                        }
                        i + 1
                    }
                    None if self.buf.len() + data.len() <= limit + 1 => {
                        // No newline yet and still within the cap: keep it.
                        self.buf.extend_from_slice(data);
                        data.len()
                    }
                    _ => {
                        // Over the cap without a newline: skip the rest of this line.
                        let mut scanner = IdScanner::default();
                        scanner.feed(&self.buf);
                        let len = self.buf.len();
                        self.buf.clear();
                        if self.framing == Framing::ContentLength {
                            out.push(Frame::Garbage(format!(
                                "a header line over {MAX_HEADER} bytes (skipped to its end)"
                            )));
                        }
                        self.state = State::Skip {
                            len,
                            remaining: None,
                            scanner,
                        };
                        0
                    }
                }
            }
        }
    }

    /// A complete line is in `buf` (with its `\n`).
    fn on_head_line(&mut self) -> Option<Frame> {
        match self.framing {
            Framing::Ndjson => {
                let mut line = std::mem::take(&mut self.buf);
                line.pop();
                if line.last() == Some(&b'\r') {
                    line.pop();
                }
                if line.iter().all(u8::is_ascii_whitespace) {
                    return None;
                }
                if line.len() > self.cap {
                    let mut scanner = IdScanner::default();
                    scanner.feed(&line);
                    return Some(Frame::Oversized {
                        len: line.len(),
                        id: scanner.id(),
                    });
                }
                Some(Frame::Message(line))
            }
            Framing::ContentLength => {
                // The header block ends with an empty line.
                let text = &self.buf;
                let end = text.ends_with(b"\r\n\r\n") || text.ends_with(b"\n\n");
                let last_line_start = text[..text.len() - 1]
                    .iter()
                    .rposition(|&b| b == b'\n')
                    .map_or(0, |i| i + 1);
                let last_line = String::from_utf8_lossy(&text[last_line_start..]);
                let last_trim = last_line.trim_end();
                if !last_trim.is_empty() && !is_header_line(last_trim) {
                    // Not a header: stray output. Drop it and everything before it.
                    let skipped = String::from_utf8_lossy(&self.buf).trim_end().to_owned();
                    self.buf.clear();
                    return Some(Frame::Garbage(skipped));
                }
                if !end {
                    if last_trim.is_empty() && self.buf.iter().all(u8::is_ascii_whitespace) {
                        self.buf.clear();
                    }
                    return None;
                }
                let block = std::mem::take(&mut self.buf);
                let block = String::from_utf8_lossy(&block);
                let mut len = None;
                for line in block.lines() {
                    if let Some((name, value)) = line.split_once(':') {
                        if name.trim().eq_ignore_ascii_case("content-length") {
                            len = value.trim().parse::<usize>().ok();
                            if len.is_none() {
                                return Some(Frame::Garbage(format!(
                                    "bad Content-Length header: {}",
                                    line.trim()
                                )));
                            }
                        }
                    }
                }
                match len {
                    None => Some(Frame::Garbage(format!(
                        "a header block without Content-Length: {}",
                        block.trim()
                    ))),
                    Some(0) => Some(Frame::Message(Vec::new())),
                    Some(n) if n > self.cap => {
                        self.state = State::Skip {
                            len: n,
                            remaining: Some(n),
                            scanner: IdScanner::default(),
                        };
                        None
                    }
                    Some(n) => {
                        self.buf = Vec::with_capacity(n);
                        self.state = State::Body { len: n };
                        None
                    }
                }
            }
        }
    }
}

fn is_header_line(line: &str) -> bool {
    match line.split_once(':') {
        Some((name, _)) => {
            !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        }
        None => false,
    }
}

/// Watches the bytes of a JSON object go by and remembers the raw text of its top-level
/// `"id"` member (a number or a string), without buffering the object.
#[derive(Clone, Debug, Default)]
pub struct IdScanner {
    depth: u32,
    in_string: bool,
    escape: bool,
    /// The current top-level string being read, when it may be a key (bounded).
    key: Vec<u8>,
    key_overflow: bool,
    /// The last complete top-level string, and whether a `:` followed it.
    last_key_is_id: bool,
    after_colon: bool,
    /// Collecting the id's value.
    value: Option<Vec<u8>>,
    found: Option<String>,
}

impl IdScanner {
    /// Feeds more bytes.
    pub fn feed(&mut self, data: &[u8]) {
        for &b in data {
            self.byte(b);
        }
    }

    /// The id seen so far.
    pub fn id(&self) -> Option<String> {
        self.found.clone()
    }

    fn byte(&mut self, b: u8) {
        if let Some(value) = &mut self.value {
            let string = value.first() == Some(&b'"');
            let done = if string {
                if value.len() > 1 && !self.escape && b == b'"' {
                    value.push(b);
                    true
                } else {
                    self.escape = !self.escape && b == b'\\';
                    value.push(b);
                    false
                }
            } else if value.is_empty() && b.is_ascii_whitespace() {
                false
            } else if b == b',' || b == b'}' || b.is_ascii_whitespace() {
                true
            } else {
                value.push(b);
                false
            };
            if value.len() > 256 {
                self.value = None;
                return;
            }
            if done {
                if let Some(v) = self.value.take() {
                    if !v.is_empty() {
                        self.found = Some(String::from_utf8_lossy(&v).into_owned());
                    }
                }
                self.escape = false;
                if !string {
                    // The delimiter also matters to the structure.
                    self.structural(b);
                }
            }
            return;
        }
        if self.in_string {
            if self.escape {
                self.escape = false;
            } else if b == b'\\' {
                self.escape = true;
            } else if b == b'"' {
                self.in_string = false;
                if self.depth == 1 && !self.key_overflow {
                    self.last_key_is_id = self.key == b"id";
                }
                return;
            }
            if self.depth == 1 {
                if self.key.len() < 8 {
                    self.key.push(b);
                } else {
                    self.key_overflow = true;
                }
            }
            return;
        }
        self.structural(b);
    }

    fn structural(&mut self, b: u8) {
        match b {
            b'"' => {
                self.in_string = true;
                self.key.clear();
                self.key_overflow = false;
                if self.after_colon {
                    self.after_colon = false;
                    self.last_key_is_id = false;
                }
            }
            b':' if self.depth == 1 => {
                if self.last_key_is_id && self.found.is_none() {
                    self.value = Some(Vec::new());
                    self.last_key_is_id = false;
                } else {
                    self.after_colon = true;
                }
            }
            b'{' | b'[' => {
                self.depth += 1;
                self.last_key_is_id = false;
            }
            b'}' | b']' => {
                self.depth = self.depth.saturating_sub(1);
            }
            b',' => self.last_key_is_id = false,
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(framing: Framing, cap: usize, chunks: &[&[u8]]) -> Vec<Frame> {
        let mut d = Decoder::new(framing, cap);
        chunks.iter().flat_map(|c| d.feed(c)).collect()
    }

    fn msg(s: &str) -> Frame {
        Frame::Message(s.as_bytes().to_vec())
    }

    #[test]
    fn ndjson_lines_split_anywhere() {
        let line = b"{\"jsonrpc\": \"2.0\", \"id\": 2, \"result\": {\"n\": 6}}\n";
        for cut in 0..line.len() {
            let got = all(Framing::Ndjson, 1024, &[&line[..cut], &line[cut..]]);
            assert_eq!(
                got,
                [msg(
                    "{\"jsonrpc\": \"2.0\", \"id\": 2, \"result\": {\"n\": 6}}"
                )]
            );
        }
    }

    #[test]
    fn ndjson_blank_lines_and_crlf() {
        let got = all(Framing::Ndjson, 1024, &[b"\n\r\n{\"a\":1}\r\n{\"b\":2}\n"]);
        assert_eq!(got, [msg("{\"a\":1}"), msg("{\"b\":2}")]);
    }

    #[test]
    fn ndjson_oversized_line_is_skipped_with_its_id() {
        let big = format!(
            "{{\"jsonrpc\": \"2.0\", \"id\": 7, \"result\": \"{}\"}}\n{{\"id\":8}}\n",
            "x".repeat(100)
        );
        for cut in [1, 10, 40, 90, big.len() - 10] {
            let (a, b) = big.as_bytes().split_at(cut);
            let got = all(Framing::Ndjson, 32, &[a, b]);
            assert_eq!(got.len(), 2, "{got:?}");
            assert!(
                matches!(&got[0], Frame::Oversized { id: Some(id), .. } if id == "7"),
                "{got:?}"
            );
            assert_eq!(got[1], msg("{\"id\":8}"));
        }
    }

    #[test]
    fn id_scanner_finds_the_top_level_id_only() {
        let mut s = IdScanner::default();
        s.feed(br#"{"result":{"id":"inner","x":[{"id":3}]},"jsonrpc":"2.0","id":12}"#);
        assert_eq!(s.id().as_deref(), Some("12"));
        let mut s = IdScanner::default();
        s.feed(br#"{"id" : "a\"b", "error":{}}"#);
        assert_eq!(s.id().as_deref(), Some(r#""a\"b""#));
        let mut s = IdScanner::default();
        s.feed(br#"{"method":"id","params":{"id":1}}"#);
        assert_eq!(s.id(), None);
    }

    #[test]
    fn content_length_round_trip_split_anywhere() {
        let body = br#"{"jsonrpc":"2.0","id":1,"result":{}}"#;
        let framed = Framing::ContentLength.encode(body);
        assert_eq!(
            framed,
            b"Content-Length: 36\r\n\r\n{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}".to_vec()
        );
        for cut in 0..framed.len() {
            let got = all(
                Framing::ContentLength,
                1024,
                &[&framed[..cut], &framed[cut..]],
            );
            assert_eq!(got, [Frame::Message(body.to_vec())]);
        }
    }

    #[test]
    fn content_length_extra_headers_and_stray_lines() {
        let input =
            b"hello from print\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}";
        let got = all(Framing::ContentLength, 1024, &[input]);
        assert_eq!(got, [Frame::Garbage("hello from print".into()), msg("{}")]);
    }

    #[test]
    fn content_length_over_cap_refused_before_buffering() {
        let mut d = Decoder::new(Framing::ContentLength, 16);
        let got = d.feed(b"Content-Length: 999999999999\r\n\r\n");
        assert!(got.is_empty());
        assert!(d.buf.capacity() < 1024);
        let body = br#"{"id":5,"result":"xxxxxxxxxxxxxxxxxxxxxxxxxx"}"#;
        let mut d = Decoder::new(Framing::ContentLength, 16);
        let mut framed = Framing::ContentLength.encode(body);
        framed.extend_from_slice(&Framing::ContentLength.encode(b"{}"));
        let got = d.feed(&framed);
        assert_eq!(
            got,
            [
                Frame::Oversized {
                    len: body.len(),
                    id: Some("5".into())
                },
                msg("{}")
            ]
        );
    }

    #[test]
    fn content_length_bad_headers() {
        let got = all(
            Framing::ContentLength,
            64,
            &[b"Content-Length: x\r\n\r\nX-Other: 1\r\n\r\nContent-Length: 2\r\n\r\n[]"],
        );
        assert_eq!(got.len(), 3, "{got:?}");
        assert!(matches!(&got[0], Frame::Garbage(g) if g.contains("bad Content-Length")));
        assert!(matches!(&got[1], Frame::Garbage(g) if g.contains("without Content-Length")));
        assert_eq!(got[2], msg("[]"));
    }

    #[test]
    fn framed_len_matches_encode() {
        for f in [Framing::Ndjson, Framing::ContentLength] {
            assert_eq!(f.framed_len(10), f.encode(&[b'x'; 10]).len());
        }
    }
}
