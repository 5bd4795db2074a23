//! The messages of the Nu plugin protocol as the bridge (the engine side) sees them: what a
//! plugin may send, parsed into [`PluginMsg`], and builders for what the engine sends.
//!
//! Nu values stay [`J`]s in their wire shape (`{"Int":{"val":5,"span":..}}`);
//! only the envelope is typed. The shapes are those nu 0.115.1 sends (see
//! `docs/plugins-nu.md`, "Where the bridge follows real behaviour").

use crate::json::J;
use crate::{arr, obj};

/// The protocol version the bridge speaks as an engine.
pub const ENGINE_VERSION: &str = "0.115.1";

/// A span in the synthesised command line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Span {
    /// First byte.
    pub start: usize,
    /// One past the last byte.
    pub end: usize,
}

impl Span {
    /// A span.
    pub fn new(start: usize, end: usize) -> Self {
        Self { start, end }
    }

    /// The wire form.
    pub fn to_value(self) -> J {
        obj! {"start" => self.start, "end" => self.end}
    }

    /// Reads a wire span.
    pub fn from_value(v: &J) -> Option<Self> {
        Some(Self {
            start: usize::try_from(v.get("start")?.as_u64()?).ok()?,
            end: usize::try_from(v.get("end")?.as_u64()?).ok()?,
        })
    }
}

/// A `LabeledError`, as far as the bridge renders it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LabeledError {
    /// The main message.
    pub msg: String,
    /// Labels: text and span.
    pub labels: Vec<(String, Option<Span>)>,
    /// A machine-friendly code.
    pub code: Option<String>,
    /// A link.
    pub url: Option<String>,
    /// Help text.
    pub help: Option<String>,
    /// Inner errors.
    pub inner: Vec<LabeledError>,
}

impl LabeledError {
    /// An error with just a message.
    pub fn msg(msg: impl Into<String>) -> Self {
        Self {
            msg: msg.into(),
            ..Self::default()
        }
    }

    /// Adds a label.
    pub fn label(mut self, text: impl Into<String>, span: Span) -> Self {
        self.labels.push((text.into(), Some(span)));
        self
    }

    /// Adds help.
    pub fn help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }

    /// Reads the wire form; anything not an object becomes its text.
    pub fn from_value(v: &J) -> Self {
        // Some senders wrap it: {"LabeledError": {..}}.
        let v = v.get("LabeledError").unwrap_or(v);
        if v.as_object().is_none() {
            return Self::msg(v.to_string());
        }
        let text = |k: &str| v.get(k).and_then(J::as_str).map(str::to_owned);
        Self {
            msg: text("msg").unwrap_or_else(|| v.to_string()),
            labels: v
                .get("labels")
                .and_then(J::as_array)
                .map(|ls| {
                    ls.iter()
                        .map(|l| {
                            (
                                l.get("text").and_then(J::as_str).unwrap_or("").to_owned(),
                                l.get("span").and_then(Span::from_value),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default(),
            code: text("code"),
            url: text("url"),
            help: text("help"),
            inner: v
                .get("inner")
                .and_then(J::as_array)
                .map(|i| i.iter().map(Self::from_value).collect())
                .unwrap_or_default(),
        }
    }

    /// The wire form.
    pub fn to_value(&self) -> J {
        obj! {
            "msg" => &self.msg,
            "labels" => self.labels.iter().map(|(t, s)| obj! {
                "text" => t,
                "span" => s.unwrap_or_default().to_value(),
            }).collect::<Vec<_>>(),
            "code" => self.code.clone(),
            "url" => self.url.clone(),
            "help" => self.help.clone(),
            "inner" => self.inner.iter().map(Self::to_value).collect::<Vec<_>>(),
        }
    }
}

/// The type of a byte stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ByteStreamType {
    /// Binary data.
    Binary,
    /// UTF-8 text.
    String,
    /// Decided by whether it decodes as UTF-8.
    Unknown,
}

impl ByteStreamType {
    fn name(self) -> &'static str {
        match self {
            ByteStreamType::Binary => "Binary",
            ByteStreamType::String => "String",
            ByteStreamType::Unknown => "Unknown",
        }
    }
}

/// A `PipelineDataHeader`.
#[derive(Clone, Debug, PartialEq)]
pub enum Header {
    /// Nothing.
    Empty,
    /// One value.
    Value(J),
    /// A list stream with this id.
    ListStream(u64),
    /// A byte stream with this id and type.
    ByteStream(u64, ByteStreamType),
}

impl Header {
    /// The wire form (`span` for streams).
    pub fn to_value(&self, span: Span) -> J {
        match self {
            Header::Empty => J::from("Empty"),
            Header::Value(v) => obj! {"Value" => arr![v, J::Null]},
            Header::ListStream(id) => obj! {"ListStream" => obj! {
            "id" => *id, "span" => span.to_value(), "metadata" => J::Null}},
            Header::ByteStream(id, ty) => obj! {"ByteStream" => obj! {
            "id" => *id, "span" => span.to_value(), "type" => ty.name(), "metadata" => J::Null}},
        }
    }

    /// Reads a wire header. The value form is `[value, metadata]` in 0.115; a bare value
    /// (older texts) is accepted too.
    pub fn from_value(v: &J) -> Result<Self, String> {
        if v.as_str() == Some("Empty") {
            return Ok(Header::Empty);
        }
        let Some((tag, body)) = v.single() else {
            return Err(format!("not a pipeline data header: {}", brief(v)));
        };
        match tag {
            "Value" => Ok(Header::Value(match body {
                J::Arr(a) if !a.is_empty() => a[0].clone(),
                other => other.clone(),
            })),
            "ListStream" => stream_id(body).map(Header::ListStream),
            "ByteStream" => {
                let ty = match body.get("type").and_then(J::as_str) {
                    Some("Binary") => ByteStreamType::Binary,
                    Some("String") => ByteStreamType::String,
                    _ => ByteStreamType::Unknown,
                };
                stream_id(body).map(|id| Header::ByteStream(id, ty))
            }
            other => Err(format!("unknown pipeline data header `{other}`")),
        }
    }
}

fn stream_id(body: &J) -> Result<u64, String> {
    body.get("id")
        .and_then(J::as_u64)
        .ok_or_else(|| format!("stream header without an id: {}", brief(body)))
}

/// A value's text, cut for error messages.
pub fn brief(v: &J) -> String {
    let mut s = v.to_string();
    if s.len() > 200 {
        let mut cut = 200;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push_str("...");
    }
    s
}

/// The plugin's `Hello`.
#[derive(Clone, Debug, PartialEq)]
pub struct Hello {
    /// Must be `nu-plugin`.
    pub protocol: String,
    /// The Nu version the plugin targets.
    pub version: String,
    /// Feature names.
    pub features: Vec<String>,
}

/// A response to a call.
#[derive(Clone, Debug, PartialEq)]
pub enum Response {
    /// Pipeline data.
    PipelineData(Header),
    /// A failure.
    Error(LabeledError),
    /// Signatures (`[{sig, examples}]`).
    Signature(Vec<J>),
    /// Metadata.
    Metadata(J),
    /// `Ok`, `Ordering`, completion items and anything else: carried as is.
    Other(J),
}

/// A chunk of stream data.
#[derive(Clone, Debug, PartialEq)]
pub enum StreamData {
    /// A list item.
    List(J),
    /// Raw bytes.
    Raw(Vec<u8>),
    /// An error in a raw stream.
    RawErr(LabeledError),
}

impl StreamData {
    /// The wire form.
    pub fn to_value(&self) -> J {
        match self {
            StreamData::List(v) => obj! {"List" => v},
            StreamData::Raw(b) => obj! {"Raw" => obj! {"Ok" => J::Bytes(b.clone())}},
            StreamData::RawErr(e) => obj! {"Raw" => obj! {"Err" => e.to_value()}},
        }
    }

    fn from_value(v: &J) -> Result<Self, String> {
        match v.single() {
            Some(("List", item)) => Ok(StreamData::List(item.clone())),
            Some(("Raw", raw)) => match raw.single() {
                Some(("Ok", bytes)) => bytes_of(bytes).map(StreamData::Raw),
                Some(("Err", e)) => Ok(StreamData::RawErr(LabeledError::from_value(e))),
                _ => Err(format!("bad Raw data: {}", brief(raw))),
            },
            _ => Err(format!("bad stream data: {}", brief(v))),
        }
    }
}

/// Bytes in either encoding's form (an array of numbers).
pub fn bytes_of(v: &J) -> Result<Vec<u8>, String> {
    if let J::Bytes(b) = v {
        return Ok(b.clone());
    }
    let Some(items) = v.as_array() else {
        return Err(format!("not a byte array: {}", brief(v)));
    };
    items
        .iter()
        .map(|b| {
            b.as_u64()
                .and_then(|n| u8::try_from(n).ok())
                .ok_or_else(|| format!("not a byte: {b}"))
        })
        .collect()
}

/// An engine call the plugin makes.
#[derive(Clone, Debug, PartialEq)]
pub enum EngineCall {
    /// `GetConfig`.
    GetConfig,
    /// `GetPluginConfig`.
    GetPluginConfig,
    /// `GetEnvVars`.
    GetEnvVars,
    /// `GetEnvVar`.
    GetEnvVar(String),
    /// `AddEnvVar`.
    AddEnvVar(String, J),
    /// `GetCurrentDir`.
    GetCurrentDir,
    /// `GetHelp`.
    GetHelp,
    /// `GetSpanContents`.
    GetSpanContents(Span),
    /// `EnterForeground`.
    EnterForeground,
    /// `LeaveForeground`.
    LeaveForeground,
    /// Anything that needs a Nu engine (`EvalClosure`, `FindDecl`, `CallDecl`,
    /// `GetBlockIR`, ...), by name.
    NeedsEngine(String),
}

impl EngineCall {
    fn from_value(v: &J) -> Self {
        if let Some(name) = v.as_str() {
            return match name {
                "GetConfig" => EngineCall::GetConfig,
                "GetPluginConfig" => EngineCall::GetPluginConfig,
                "GetEnvVars" => EngineCall::GetEnvVars,
                "GetCurrentDir" => EngineCall::GetCurrentDir,
                "GetHelp" => EngineCall::GetHelp,
                "EnterForeground" => EngineCall::EnterForeground,
                "LeaveForeground" => EngineCall::LeaveForeground,
                other => EngineCall::NeedsEngine(other.to_owned()),
            };
        }
        match v.single() {
            Some(("GetEnvVar", J::Str(s))) => EngineCall::GetEnvVar(s.clone()),
            Some(("AddEnvVar", J::Arr(a))) if a.len() == 2 && a[0].is_string() => {
                EngineCall::AddEnvVar(a[0].as_str().unwrap_or("").to_owned(), a[1].clone())
            }
            Some(("GetSpanContents", span)) => match Span::from_value(span) {
                Some(s) => EngineCall::GetSpanContents(s),
                None => EngineCall::NeedsEngine("GetSpanContents".into()),
            },
            Some((name, _)) => EngineCall::NeedsEngine(name.to_owned()),
            None => EngineCall::NeedsEngine(brief(v)),
        }
    }
}

/// A message from the plugin.
#[derive(Clone, Debug, PartialEq)]
pub enum PluginMsg {
    /// The handshake.
    Hello(Hello),
    /// A response to call `id`.
    CallResponse(u64, Response),
    /// An engine call in the context of call `context`.
    EngineCall {
        /// The plugin call it belongs to.
        context: u64,
        /// Its own id, for the answer.
        id: u64,
        /// What it asks.
        call: EngineCall,
    },
    /// Stream data for the plugin's stream `id`.
    Data(u64, StreamData),
    /// The plugin's stream `id` ended.
    End(u64),
    /// The plugin consumed an item of our stream `id`.
    Ack(u64),
    /// The plugin wants no more of our stream `id`.
    Drop(u64),
    /// `Option {"GcDisabled": b}`.
    GcDisabled(bool),
    /// Any other option: ignored.
    OtherOption(J),
    /// `Goodbye` (not expected from a plugin; ignored).
    Goodbye,
}

/// A message the bridge cannot make sense of.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the plugin sent an unknown or malformed message: {0}")]
pub struct BadMessage(pub String);

/// The only key and value of a one-key object, taken apart; the value back when it is not
/// one.
fn take_single(v: J) -> Result<(String, J), J> {
    match v {
        J::Obj(mut pairs) if pairs.len() == 1 => match pairs.pop() {
            Some(pair) => Ok(pair),
            None => Err(J::Obj(pairs)),
        },
        other => Err(other),
    }
}

/// `[id, body]` taken apart; the value back when it is not that.
fn take_pair(v: J) -> Result<(u64, J), J> {
    match v {
        J::Arr(mut a) if a.len() == 2 && a[0].as_u64().is_some() => {
            let body = a.pop().unwrap_or_default();
            match a.pop().and_then(|id| id.as_u64()) {
                Some(id) => Ok((id, body)),
                None => Err(J::Arr(vec![J::Null, body])),
            }
        }
        other => Err(other),
    }
}

impl PluginMsg {
    /// Parses a decoded message, moving the large parts (a response's value, a stream
    /// item or chunk) out of it instead of copying them; the same result as
    /// [`PluginMsg::parse`].
    pub fn parse_owned(v: J) -> Result<Self, BadMessage> {
        let (tag, body) = match take_single(v) {
            Ok(p) => p,
            Err(v) => return Self::parse(&v),
        };
        let (id, inner) = match (tag.as_str(), take_pair(body)) {
            ("CallResponse" | "Data", Ok(p)) => p,
            (_, Ok((id, b))) => return Self::parse(&obj! {tag => arr![id, b]}),
            (_, Err(body)) => return Self::parse(&obj! {tag => body}),
        };
        let (kind, payload) = match take_single(inner) {
            Ok(p) => p,
            Err(inner) => return Self::parse(&obj! {tag => arr![id, inner]}),
        };
        match (tag.as_str(), kind.as_str()) {
            ("CallResponse", "PipelineData") => match take_single(payload) {
                Ok((h, body)) if h == "Value" => {
                    let value = match body {
                        J::Arr(mut a) if !a.is_empty() => a.swap_remove(0),
                        other => other,
                    };
                    Ok(PluginMsg::CallResponse(
                        id,
                        Response::PipelineData(Header::Value(value)),
                    ))
                }
                Ok((h, body)) => {
                    Self::parse(&obj! {tag => arr![id, obj! {kind => obj! {h => body}}]})
                }
                Err(p) => Self::parse(&obj! {tag => arr![id, obj! {kind => p}]}),
            },
            ("Data", "List") => Ok(PluginMsg::Data(id, StreamData::List(payload))),
            ("Data", "Raw") => match take_single(payload) {
                Ok((r, J::Bytes(b))) if r == "Ok" => Ok(PluginMsg::Data(id, StreamData::Raw(b))),
                Ok((r, x)) => Self::parse(&obj! {tag => arr![id, obj! {kind => obj! {r => x}}]}),
                Err(p) => Self::parse(&obj! {tag => arr![id, obj! {kind => p}]}),
            },
            _ => Self::parse(&obj! {tag => arr![id, obj! {kind => payload}]}),
        }
    }

    /// Parses a decoded message.
    pub fn parse(v: &J) -> Result<Self, BadMessage> {
        let bad = |why: &str| BadMessage(format!("{why}: {}", brief(v)));
        if v.as_str() == Some("Goodbye") {
            return Ok(PluginMsg::Goodbye);
        }
        let Some((tag, body)) = v.single() else {
            return Err(bad("not a message"));
        };
        let id_of = |x: &J| x.as_u64().ok_or_else(|| bad("bad id"));
        let pair = |x: &J| -> Result<(u64, J), BadMessage> {
            match x.as_array().map(Vec::as_slice) {
                Some([id, body]) => Ok((id_of(id)?, body.clone())),
                _ => Err(bad("expected [id, body]")),
            }
        };
        match tag {
            "Hello" => {
                let s = |k: &str| body.get(k).and_then(J::as_str).map(str::to_owned);
                Ok(PluginMsg::Hello(Hello {
                    protocol: s("protocol").ok_or_else(|| bad("Hello without protocol"))?,
                    version: s("version").ok_or_else(|| bad("Hello without version"))?,
                    features: body
                        .get("features")
                        .and_then(J::as_array)
                        .map(|fs| {
                            fs.iter()
                                .filter_map(|f| f.get("name").and_then(J::as_str))
                                .map(str::to_owned)
                                .collect()
                        })
                        .unwrap_or_default(),
                }))
            }
            "CallResponse" => {
                let (id, resp) = pair(body)?;
                let resp = match resp.single() {
                    Some(("PipelineData", h)) => {
                        Response::PipelineData(Header::from_value(h).map_err(|e| bad(&e))?)
                    }
                    Some(("Error", e)) => Response::Error(LabeledError::from_value(e)),
                    Some(("Signature", J::Arr(sigs))) => Response::Signature(sigs.clone()),
                    Some(("Metadata", m)) => Response::Metadata(m.clone()),
                    _ => Response::Other(resp),
                };
                Ok(PluginMsg::CallResponse(id, resp))
            }
            "EngineCall" => Ok(PluginMsg::EngineCall {
                context: id_of(body.get("context").unwrap_or(&J::Null))?,
                id: id_of(body.get("id").unwrap_or(&J::Null))?,
                call: EngineCall::from_value(body.get("call").unwrap_or(&J::Null)),
            }),
            "Data" => {
                let (id, data) = pair(body)?;
                Ok(PluginMsg::Data(
                    id,
                    StreamData::from_value(&data).map_err(|e| bad(&e))?,
                ))
            }
            "End" => Ok(PluginMsg::End(id_of(body)?)),
            "Ack" => Ok(PluginMsg::Ack(id_of(body)?)),
            "Drop" => Ok(PluginMsg::Drop(id_of(body)?)),
            "Option" => match body.single() {
                Some(("GcDisabled", J::Bool(b))) => Ok(PluginMsg::GcDisabled(*b)),
                _ => Ok(PluginMsg::OtherOption(body.clone())),
            },
            _ => Err(bad("unknown message")),
        }
    }
}

/// The engine's `Hello`.
pub fn hello() -> J {
    obj! {"Hello" => obj! {"protocol" => "nu-plugin", "version" => ENGINE_VERSION, "features" => J::Arr(vec![])}}
}

/// `Call [id, "Metadata"]`.
pub fn call_metadata(id: u64) -> J {
    obj! {"Call" => arr![id, "Metadata"]}
}

/// `Call [id, "Signature"]`.
pub fn call_signature(id: u64) -> J {
    obj! {"Call" => arr![id, "Signature"]}
}

/// An evaluated call: the head span, positional values and named arguments (long name,
/// its span, and a value or `None` for a switch).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EvaluatedCall {
    /// The command's span.
    pub head: Span,
    /// Positional values.
    pub positional: Vec<J>,
    /// Named arguments.
    pub named: Vec<(String, Span, Option<J>)>,
}

impl EvaluatedCall {
    /// The wire form.
    pub fn to_value(&self) -> J {
        obj! {
            "head" => self.head.to_value(),
            "positional" => self.positional.clone(),
            "named" => self.named.iter().map(|(name, span, v)| arr![
                obj! {"item" => name, "span" => span.to_value()}, v.clone()
            ]).collect::<Vec<_>>(),
        }
    }
}

/// `Call [id, {"Run": ..}]`.
pub fn call_run(id: u64, name: &str, call: &EvaluatedCall, input: &J) -> J {
    obj! {"Call" => arr![id, obj! {"Run" => obj! {"name" => name, "call" => call.to_value(), "input" => input}}]}
}

/// Stream data from the engine.
pub fn data(id: u64, d: &StreamData) -> J {
    obj! {"Data" => arr![id, d.to_value()]}
}

/// End of an engine stream.
pub fn end(id: u64) -> J {
    obj! {"End" => id}
}

/// The engine consumed an item of the plugin's stream.
pub fn ack(id: u64) -> J {
    obj! {"Ack" => id}
}

/// The engine wants no more of the plugin's stream.
pub fn drop_stream(id: u64) -> J {
    obj! {"Drop" => id}
}

/// `Signal`.
pub fn signal(name: &str) -> J {
    obj! {"Signal" => name}
}

/// `Goodbye`.
pub fn goodbye() -> J {
    J::from("Goodbye")
}

/// `EngineCallResponse [id, body]`.
pub fn engine_response(id: u64, body: J) -> J {
    obj! {"EngineCallResponse" => arr![id, body]}
}

/// Checks a plugin's version against the engine's, as Nu does: caret compatibility on the
/// lower of the two (`0.x.y` needs the same `0.x`; `x.y.z` with `x > 0` the same `x`).
pub fn versions_compatible(engine: &str, plugin: &str) -> Result<(), String> {
    let parse = |s: &str| -> Option<(u64, u64, u64)> {
        let core = s.split(['-', '+']).next()?;
        let mut it = core.split('.').map(|p| p.parse::<u64>().ok());
        Some((it.next()??, it.next()??, it.next()??))
    };
    let (Some(e), Some(p)) = (parse(engine), parse(plugin)) else {
        return Err(format!(
            "the plugin's version `{plugin}` is not a semantic version"
        ));
    };
    let (low, high) = if e <= p { (e, p) } else { (p, e) };
    let ok = if low.0 > 0 {
        low.0 == high.0
    } else if low.1 > 0 {
        high.0 == 0 && low.1 == high.1
    } else {
        high == low
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "the plugin targets Nu {plugin}, which is not compatible with Nu {engine} (the bridge's protocol version)"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{Decoder, Encoding};

    fn j(text: &str) -> J {
        J::parse(text.as_bytes()).unwrap()
    }

    fn parse_line(line: &str) -> PluginMsg {
        let mut d = Decoder::new(Encoding::Json, 1 << 20);
        d.feed(line.as_bytes());
        d.feed(b"\n");
        let v = d.next_message().unwrap().unwrap();
        let by_ref = PluginMsg::parse(&v).unwrap();
        // Through msgpack too: raw chunks arrive as `bin` there.
        let packed = crate::codec::decode_msgpack(&Encoding::MsgPack.encode(&v)).unwrap();
        assert_eq!(PluginMsg::parse_owned(packed), Ok(by_ref.clone()), "{line}");
        assert_eq!(PluginMsg::parse_owned(v), Ok(by_ref.clone()), "{line}");
        by_ref
    }

    #[test]
    fn engine_messages_are_byte_exact() {
        // As nu 0.115.1 sends them to nu_plugin_inc (captured on the wire), apart from the
        // features: the bridge advertises none (it does not do LocalSocket).
        assert_eq!(
            Encoding::Json.encode(&call_metadata(0)),
            b"{\"Call\":[0,\"Metadata\"]}\n"
        );
        assert_eq!(
            Encoding::Json.encode(&call_signature(1)),
            b"{\"Call\":[1,\"Signature\"]}\n"
        );
        assert_eq!(
            Encoding::Json.encode(&hello()),
            b"{\"Hello\":{\"protocol\":\"nu-plugin\",\"version\":\"0.115.1\",\"features\":[]}}\n"
        );
        assert_eq!(Encoding::Json.encode(&goodbye()), b"\"Goodbye\"\n");
        let call = EvaluatedCall {
            head: Span::new(146994, 146997),
            positional: vec![],
            named: vec![("minor".into(), Span::new(146998, 147005), None)],
        };
        let input = Header::Value(j(
            r#"{"String":{"val":"0.1.2","span":{"start":146984,"end":146991}}}"#,
        ))
        .to_value(Span::default());
        let expected = r#"{"Call":[3,{"Run":{"name":"inc","call":{"head":{"start":146994,"end":146997},"positional":[],"named":[[{"item":"minor","span":{"start":146998,"end":147005}},null]]},"input":{"Value":[{"String":{"val":"0.1.2","span":{"start":146984,"end":146991}}},null]}}}]}"#;
        assert_eq!(
            String::from_utf8(Encoding::Json.encode(&call_run(3, "inc", &call, &input))).unwrap(),
            format!("{expected}\n")
        );
        // nu_plugin_inc.8898.in: a byte stream from an external command.
        let input =
            Header::ByteStream(0, ByteStreamType::Unknown).to_value(Span::new(146973, 146979));
        let call = EvaluatedCall {
            head: Span::new(146990, 146993),
            positional: vec![],
            named: vec![("patch".into(), Span::new(146994, 147001), None)],
        };
        let expected = r#"{"Call":[2,{"Run":{"name":"inc","call":{"head":{"start":146990,"end":146993},"positional":[],"named":[[{"item":"patch","span":{"start":146994,"end":147001}},null]]},"input":{"ByteStream":{"id":0,"span":{"start":146973,"end":146979},"type":"Unknown","metadata":null}}}}]}"#;
        assert_eq!(
            String::from_utf8(Encoding::Json.encode(&call_run(2, "inc", &call, &input))).unwrap(),
            format!("{expected}\n")
        );
        assert_eq!(
            Encoding::Json.encode(&data(0, &StreamData::Raw(b"1.2.3".to_vec()))),
            b"{\"Data\":[0,{\"Raw\":{\"Ok\":[49,46,50,46,51]}}]}\n"
        );
        assert_eq!(Encoding::Json.encode(&end(0)), b"{\"End\":0}\n");
        // nu_plugin_inc.8840.in: a list stream.
        assert_eq!(
            Encoding::Json.encode(&data(0, &StreamData::List(j(r#"{"Int":{"val":1,"span":{"start":146992,"end":146994}}}"#)))),
            b"{\"Data\":[0,{\"List\":{\"Int\":{\"val\":1,\"span\":{\"start\":146992,\"end\":146994}}}}]}\n"
        );
    }

    #[test]
    fn plugin_messages_from_the_captures() {
        assert_eq!(
            parse_line(r#"{"Hello":{"protocol":"nu-plugin","version":"0.115.1","features":[]}}"#),
            PluginMsg::Hello(Hello {
                protocol: "nu-plugin".into(),
                version: "0.115.1".into(),
                features: vec![]
            })
        );
        assert_eq!(
            parse_line(r#"{"CallResponse":[0,{"Metadata":{"version":"0.115.1"}}]}"#),
            PluginMsg::CallResponse(0, Response::Metadata(j(r#"{"version":"0.115.1"}"#)))
        );
        assert_eq!(
            parse_line(
                r#"{"CallResponse":[2,{"PipelineData":{"Value":[{"Int":{"val":6,"span":{"start":146978,"end":146981}}},null]}}]}"#
            ),
            PluginMsg::CallResponse(
                2,
                Response::PipelineData(Header::Value(j(
                    r#"{"Int":{"val":6,"span":{"start":146978,"end":146981}}}"#
                )))
            )
        );
        assert_eq!(parse_line(r#"{"Ack":0}"#), PluginMsg::Ack(0));
        assert_eq!(parse_line(r#"{"Drop":0}"#), PluginMsg::Drop(0));
        let PluginMsg::CallResponse(2, Response::Error(e)) = parse_line(
            r#"{"CallResponse":[2,{"Error":{"msg":"Unable to extract string","labels":[{"text":"value cannot be converted to string List([Int(1), Int(2), Int(3)]) - Can't convert to string.","span":{"start":146999,"end":147002}}],"code":null,"url":null,"help":null,"inner":[]}}]}"#,
        ) else {
            panic!("not an error response")
        };
        assert_eq!(e.msg, "Unable to extract string");
        assert_eq!(e.labels[0].1, Some(Span::new(146999, 147002)));
        assert_eq!(
            parse_line(r#"{"EngineCall":{"context":2,"id":0,"call":"GetHelp"}}"#),
            PluginMsg::EngineCall {
                context: 2,
                id: 0,
                call: EngineCall::GetHelp
            }
        );
        assert_eq!(
            parse_line(
                r#"{"EngineCall":{"context":1,"id":7,"call":{"EvalClosure":{"closure":{}}}}}"#
            ),
            PluginMsg::EngineCall {
                context: 1,
                id: 7,
                call: EngineCall::NeedsEngine("EvalClosure".into())
            }
        );
        assert_eq!(
            parse_line(r#"{"Option":{"GcDisabled":true}}"#),
            PluginMsg::GcDisabled(true)
        );
        assert_eq!(
            parse_line(r#"{"Data":[0,{"Raw":{"Ok":[49,46]}}]}"#),
            PluginMsg::Data(0, StreamData::Raw(b"1.".to_vec()))
        );
        assert_eq!(
            parse_line(r#"{"Data":[3,{"List":{"Int":{"val":1,"span":{"start":0,"end":0}}}}]}"#),
            PluginMsg::Data(
                3,
                StreamData::List(j(r#"{"Int":{"val":1,"span":{"start":0,"end":0}}}"#))
            )
        );
        // A raw chunk as msgpack `bin` moves over as it is.
        let packed =
            obj! {"Data" => arr![4u64, obj! {"Raw" => obj! {"Ok" => J::Bytes(b"xy".to_vec())}}]};
        assert_eq!(
            PluginMsg::parse_owned(packed.clone()),
            Ok(PluginMsg::Data(4, StreamData::Raw(b"xy".to_vec())))
        );
        assert_eq!(
            PluginMsg::parse_owned(packed.clone()),
            PluginMsg::parse(&packed)
        );
        // Shapes the owned path does not take apart still parse (or fail) the same.
        for odd in [
            r#"{"Data":[0,{"Raw":{"Err":{"msg":"x"}}}]}"#,
            r#"{"Data":[0,{"Weird":1}]}"#,
            r#"{"Data":[0]}"#,
            r#"{"CallResponse":[1,{"PipelineData":"Empty"}]}"#,
            r#"{"CallResponse":[1,{"PipelineData":{"ListStream":{"id":2,"span":{"start":0,"end":0},"metadata":null}}}]}"#,
            r#"{"CallResponse":["x",{"Ok":null}]}"#,
            r#"{"CallResponse":[1,{"PipelineData":{"Value":{"Int":{"val":1,"span":{"start":0,"end":0}}}}}]}"#,
            r#""Goodbye""#,
            r#"[1,2]"#,
        ] {
            assert_eq!(
                PluginMsg::parse_owned(j(odd)),
                PluginMsg::parse(&j(odd)),
                "{odd}"
            );
        }
    }

    #[test]
    fn versions_are_caret_compatible_on_the_lower_one() {
        assert!(versions_compatible("0.115.1", "0.115.0").is_ok());
        assert!(versions_compatible("0.115.1", "0.115.9").is_ok());
        assert!(versions_compatible("0.115.1", "0.114.0").is_err());
        assert!(versions_compatible("0.115.1", "0.116.0").is_err());
        assert!(versions_compatible("0.115.1", "1.0.0").is_err());
        assert!(versions_compatible("0.115.1", "banana").is_err());
    }
}
