//! `ngw-vocab`: the vocabulary of ngd's worker protocol (`docs/ngw.md`), shared by the
//! host (`ngd`), the Rust worker runtime (`ngw`) and the bridges, so that each word is
//! defined once.
//!
//! # Layout
//!
//! * [`feature`]: the features a hello and `NGW_HOST_FEATURES` name ([`WorkerFeature`],
//!   [`WorkerFeatures`]);
//! * [`hello`]: the hello's fields ([`Hello`]) and the protocol version;
//! * [`notice`]: the kinds of an `n` chunk ([`NoticeKind`]);
//! * [`signal`]: what a forwarded signal does to a command ([`Effect`]), over `ng-proto`'s
//!   one table of signal names;
//! * [`restart`]: when a failed process is started again, and when not ([`RestartPolicy`]);
//! * [`bridge`]: what ngd tells a bridge about its plugin ([`BridgeConfig`]).
//!
//! The chunk types, the worker's included (`h`, `i`, `n`, `t`, `z`, ...), are
//! [`ChunkType`]'s constants in `ng-proto`, next to the codec that reads them.
//!
//! The SDKs in other languages are checked against these tables by their tests
//! (`sdk/python/tests/test_vocabulary.py`, `sdk/java/tests/ngw/exact/SignalsTest.java`),
//! which read them from this crate's source; so each table entry stays on one line.
//!
//! This crate performs no I/O, except [`BridgeConfig::from_env`] reading one variable.

pub mod bridge;
pub mod feature;
pub mod hello;
pub mod notice;
pub mod restart;
pub mod signal;

pub use bridge::BridgeConfig;
pub use feature::{WorkerFeature, WorkerFeatures};
pub use hello::{Hello, PROTOCOL};
pub use ng_proto::{ChunkType, Signal, SignalName};
pub use notice::NoticeKind;
pub use restart::RestartPolicy;
pub use signal::Effect;
