//! The engine side of one plugin connection, sans I/O: the handshake, call and stream ids,
//! and the routing of every message the plugin sends to the call it belongs to.
//!
//! Many calls run at once on one plugin process (the protocol multiplexes them by call
//! id). The [`Router`] allocates call ids and engine-side stream ids, learns the plugin's
//! stream ids from its responses, and says for each incoming message which call gets it,
//! what to answer on the spot, or that the connection is broken. The I/O shell
//! ([`crate::plugin`]) owns the process and the threads.

use crate::json::J;
use crate::msg::{
    self, versions_compatible, EngineCall, Header, LabeledError, PluginMsg, Response, StreamData,
};
use crate::obj;
use std::collections::HashMap;

/// Where the handshake is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Waiting for the plugin's `Hello`.
    AwaitHello,
    /// Calls may run.
    Ready,
}

/// Something for one call.
#[derive(Clone, Debug, PartialEq)]
pub enum Event {
    /// The call's response.
    Response(Response),
    /// Data of the plugin's output stream `id`.
    Data(u64, StreamData),
    /// The plugin's output stream `id` ended.
    End(u64),
    /// The plugin consumed one item of the call's input stream.
    Ack,
    /// The plugin wants no more of the call's input stream.
    Drop,
    /// An engine call to answer.
    EngineCall(u64, EngineCall),
    /// The plugin is gone or broke the protocol; the text says how, the code is the exit
    /// code the session should end with.
    Failed(String, i32),
}

/// What to do with a message from the plugin.
#[derive(Clone, Debug, PartialEq)]
pub enum Routed {
    /// The handshake finished.
    Ready,
    /// Hand the event to call `id`.
    ToCall(u64, Event),
    /// Hand the event to the input feeder of call `id`.
    ToInput(u64, Event),
    /// Send this reply to the plugin.
    Reply(J),
    /// The plugin changed its GC option.
    GcDisabled(bool),
    /// Nothing to do (late messages for calls that ended, options we do not use).
    Ignore(String),
    /// The connection cannot go on.
    Fatal(String),
}

/// The routing state of one plugin connection.
#[derive(Debug)]
pub struct Router {
    phase: Phase,
    next_call: u64,
    next_stream: u64,
    /// Calls that have not finished.
    calls: HashMap<u64, ()>,
    /// The plugin's stream ids → call.
    plugin_streams: HashMap<u64, u64>,
    /// The engine's stream ids → call.
    engine_streams: HashMap<u64, u64>,
    /// The plugin's `Hello`, once it came.
    plugin_version: Option<String>,
}

impl Default for Router {
    fn default() -> Self {
        Self::new()
    }
}

impl Router {
    /// A connection waiting for the plugin's `Hello`.
    pub fn new() -> Self {
        Self {
            phase: Phase::AwaitHello,
            next_call: 0,
            next_stream: 0,
            calls: HashMap::new(),
            plugin_streams: HashMap::new(),
            engine_streams: HashMap::new(),
            plugin_version: None,
        }
    }

    /// Where the handshake is.
    pub fn phase(&self) -> &Phase {
        &self.phase
    }

    /// The version the plugin announced.
    pub fn plugin_version(&self) -> Option<&str> {
        self.plugin_version.as_deref()
    }

    /// Starts a call: its id.
    pub fn start_call(&mut self) -> u64 {
        let id = self.next_call;
        self.next_call += 1;
        self.calls.insert(id, ());
        id
    }

    /// Allocates an engine stream (the call's input) for call `call`.
    pub fn start_input_stream(&mut self, call: u64) -> u64 {
        let id = self.next_stream;
        self.next_stream += 1;
        self.engine_streams.insert(id, call);
        id
    }

    /// Forgets call `call` and its streams; later messages for it are ignored.
    pub fn finish_call(&mut self, call: u64) {
        self.calls.remove(&call);
        self.plugin_streams.retain(|_, c| *c != call);
        self.engine_streams.retain(|_, c| *c != call);
    }

    /// Calls not finished.
    pub fn active_calls(&self) -> Vec<u64> {
        self.calls.keys().copied().collect()
    }

    /// Routes one decoded message (taken by value: a response's value or a stream item
    /// moves on to its call without a copy).
    pub fn on_message(&mut self, value: J) -> Routed {
        let shown = if self.phase == Phase::AwaitHello {
            msg::brief(&value)
        } else {
            String::new()
        };
        let msg = match PluginMsg::parse_owned(value) {
            Ok(m) => m,
            Err(e) => return Routed::Fatal(e.to_string()),
        };
        if self.phase == Phase::AwaitHello {
            return match msg {
                PluginMsg::Hello(h) => {
                    if h.protocol != "nu-plugin" {
                        return Routed::Fatal(format!(
                            "the plugin speaks protocol `{}`, not `nu-plugin`",
                            h.protocol
                        ));
                    }
                    if let Err(e) = versions_compatible(msg::ENGINE_VERSION, &h.version) {
                        return Routed::Fatal(e);
                    }
                    self.plugin_version = Some(h.version);
                    self.phase = Phase::Ready;
                    Routed::Ready
                }
                _ => Routed::Fatal(format!("the plugin's first message is not Hello: {shown}")),
            };
        }
        match msg {
            PluginMsg::Hello(_) => Routed::Fatal("the plugin sent a second Hello".into()),
            PluginMsg::CallResponse(id, resp) => {
                if !self.calls.contains_key(&id) {
                    return Routed::Ignore(format!("response to call {id}, which is not running"));
                }
                if let Response::PipelineData(
                    Header::ListStream(sid) | Header::ByteStream(sid, _),
                ) = &resp
                {
                    self.plugin_streams.insert(*sid, id);
                }
                Routed::ToCall(id, Event::Response(resp))
            }
            PluginMsg::EngineCall { context, id, call } => {
                if self.calls.contains_key(&context) {
                    Routed::ToCall(context, Event::EngineCall(id, call))
                } else {
                    Routed::Reply(engine_error(
                        id,
                        &format!("engine call for call {context}, which is not running"),
                    ))
                }
            }
            PluginMsg::Data(sid, data) => match self.plugin_streams.get(&sid) {
                Some(&call) => Routed::ToCall(call, Event::Data(sid, data)),
                None => Routed::Ignore(format!("data for stream {sid}, which is not open")),
            },
            PluginMsg::End(sid) => match self.plugin_streams.remove(&sid) {
                Some(call) => Routed::ToCall(call, Event::End(sid)),
                None => Routed::Ignore(format!("end of stream {sid}, which is not open")),
            },
            PluginMsg::Ack(sid) => match self.engine_streams.get(&sid) {
                Some(&call) => Routed::ToInput(call, Event::Ack),
                None => Routed::Ignore(format!("ack for stream {sid}, which is not open")),
            },
            PluginMsg::Drop(sid) => match self.engine_streams.get(&sid) {
                Some(&call) => Routed::ToInput(call, Event::Drop),
                None => Routed::Ignore(format!("drop of stream {sid}, which is not open")),
            },
            PluginMsg::GcDisabled(b) => Routed::GcDisabled(b),
            PluginMsg::OtherOption(v) => Routed::Ignore(format!("option {}", msg::brief(&v))),
            PluginMsg::Goodbye => Routed::Ignore("Goodbye from the plugin".into()),
        }
    }
}

/// An `EngineCallResponse` carrying an error.
pub fn engine_error(id: u64, text: &str) -> J {
    msg::engine_response(id, obj! {"Error" => LabeledError::msg(text).to_value()})
}

/// The number of unacknowledged items a producer may have in flight: 100 list items, 50
/// raw chunks (as Nu's stream writers).
pub fn window(list: bool) -> usize {
    if list {
        100
    } else {
        50
    }
}

/// Flow control of one engine-side stream: how many items are in flight.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    limit: usize,
    in_flight: usize,
    dropped: bool,
}

impl Window {
    /// A window for a list (`true`) or raw stream.
    pub fn new(list: bool) -> Self {
        Self {
            limit: window(list),
            in_flight: 0,
            dropped: false,
        }
    }

    /// Whether another item may be sent now.
    pub fn can_send(&self) -> bool {
        !self.dropped && self.in_flight < self.limit
    }

    /// An item was sent.
    pub fn sent(&mut self) {
        self.in_flight += 1;
    }

    /// The consumer acknowledged one.
    pub fn ack(&mut self) {
        self.in_flight = self.in_flight.saturating_sub(1);
    }

    /// The consumer dropped the stream.
    pub fn drop_stream(&mut self) {
        self.dropped = true;
    }

    /// Whether the consumer dropped the stream.
    pub fn dropped(&self) -> bool {
        self.dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{Decoder, Encoding};
    use crate::msg::ByteStreamType;

    fn j(text: &str) -> J {
        J::parse(text.as_bytes()).unwrap()
    }

    fn decode_all(text: &str) -> Vec<J> {
        let mut d = Decoder::new(Encoding::Json, 1 << 20);
        d.feed(text.as_bytes());
        let mut out = vec![];
        while let Some(v) = d.next_message().unwrap() {
            out.push(v);
        }
        out
    }

    #[test]
    fn routes_the_capture_of_a_list_stream_call() {
        // captures: nu_plugin_inc.8840: the engine streams [1 2 3]; the plugin acks each
        // item, drops the stream and answers with an error.
        let mut r = Router::new();
        let msgs = decode_all(concat!(
            r#"{"Hello":{"protocol":"nu-plugin","version":"0.115.1","features":[]}}"#,
            "\n",
            r#"{"Ack":0}"#,
            "\n",
            r#"{"Ack":0}"#,
            "\n",
            r#"{"Ack":0}"#,
            "\n",
            r#"{"Drop":0}"#,
            "\n",
            r#"{"CallResponse":[2,{"Error":{"msg":"Unable to extract string","labels":[],"code":null,"url":null,"help":null,"inner":[]}}]}"#,
            "\n",
        ));
        assert_eq!(r.on_message(msgs[0].clone()), Routed::Ready);
        assert_eq!(r.plugin_version(), Some("0.115.1"));
        // Metadata and Signature took ids 0 and 1.
        let (m, s) = (r.start_call(), r.start_call());
        r.finish_call(m);
        r.finish_call(s);
        let call = r.start_call();
        assert_eq!(call, 2);
        assert_eq!(r.start_input_stream(call), 0);
        for m in &msgs[1..4] {
            assert_eq!(r.on_message(m.clone()), Routed::ToInput(2, Event::Ack));
        }
        assert_eq!(
            r.on_message(msgs[4].clone()),
            Routed::ToInput(2, Event::Drop)
        );
        assert!(matches!(
            r.on_message(msgs[5].clone()),
            Routed::ToCall(2, Event::Response(Response::Error(_)))
        ));
        r.finish_call(2);
        assert!(matches!(r.on_message(msgs[1].clone()), Routed::Ignore(_)));
    }

    #[test]
    fn plugin_streams_are_learned_from_responses() {
        let mut r = Router::new();
        r.on_message(j(
            r#"{"Hello":{"protocol":"nu-plugin","version":"0.115.0","features":[]}}"#,
        ));
        let c = r.start_call();
        assert_eq!(c, 0);
        let resp = j(
            r#"{"CallResponse":[0,{"PipelineData":{"ByteStream":{"id":7,"span":{"start":0,"end":0},"type":"String","metadata":null}}}]}"#,
        );
        assert_eq!(
            r.on_message(resp.clone()),
            Routed::ToCall(
                c,
                Event::Response(Response::PipelineData(Header::ByteStream(
                    7,
                    ByteStreamType::String
                )))
            )
        );
        assert_eq!(
            r.on_message(j(r#"{"Data":[7,{"Raw":{"Ok":[104,105]}}]}"#)),
            Routed::ToCall(c, Event::Data(7, StreamData::Raw(b"hi".to_vec())))
        );
        assert_eq!(
            r.on_message(j(r#"{"End":7}"#)),
            Routed::ToCall(c, Event::End(7))
        );
        assert!(matches!(r.on_message(j(r#"{"End":7}"#)), Routed::Ignore(_)));
    }

    #[test]
    fn handshake_failures_are_fatal_with_a_reason() {
        let mut r = Router::new();
        let Routed::Fatal(why) = r.on_message(j(
            r#"{"Hello":{"protocol":"nu-plugin","version":"0.114.0","features":[]}}"#,
        )) else {
            panic!()
        };
        assert!(why.contains("0.114.0"), "{why}");
        let mut r = Router::new();
        assert!(matches!(r.on_message(j(r#"{"Ack":0}"#)), Routed::Fatal(_)));
        let mut r = Router::new();
        r.on_message(j(
            r#"{"Hello":{"protocol":"nu-plugin","version":"0.115.1","features":[]}}"#,
        ));
        assert!(matches!(
            r.on_message(j(r#"{"Bogus":1}"#)),
            Routed::Fatal(_)
        ));
        assert!(matches!(r.on_message(j(r#"[1, 2]"#)), Routed::Fatal(_)));
    }

    #[test]
    fn engine_calls_outside_a_call_get_an_error_reply() {
        let mut r = Router::new();
        r.on_message(j(
            r#"{"Hello":{"protocol":"nu-plugin","version":"0.115.1","features":[]}}"#,
        ));
        let Routed::Reply(v) = r.on_message(j(
            r#"{"EngineCall":{"context":9,"id":3,"call":"GetConfig"}}"#,
        )) else {
            panic!()
        };
        assert_eq!(v["EngineCallResponse"][0], 3);
        assert!(v["EngineCallResponse"][1]["Error"]["msg"].is_string());
        assert_eq!(
            r.on_message(j(r#"{"Option":{"GcDisabled":true}}"#)),
            Routed::GcDisabled(true)
        );
    }

    #[test]
    fn windows_block_at_100_items_and_50_chunks() {
        let mut w = Window::new(true);
        for _ in 0..100 {
            assert!(w.can_send());
            w.sent();
        }
        assert!(!w.can_send());
        w.ack();
        assert!(w.can_send());
        let mut w = Window::new(false);
        for _ in 0..50 {
            w.sent();
        }
        assert!(!w.can_send());
        w.ack();
        w.drop_stream();
        assert!(!w.can_send());
    }
}
