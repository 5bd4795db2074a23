//! `ngw`: the worker side of ngd's worker protocol (`docs/ngw.md`), for workers written in
//! Rust and for the bridges that carry other plugin protocols (`docs/ngw.md` §15.2).
//!
//! A worker is started by ngd with a channel on the fd named by `NGW_FD`. It says hello,
//! then serves sessions: each one is a client's command line, environment, directory and
//! stdio, and ends with an exit code. With [`Hello::max_sessions`] above 1 the worker
//! announces `mux` and runs that many sessions at once, each on its own thread.
//!
//! ```no_run
//! use std::io::Write;
//! let channel = ngw::Channel::from_env().unwrap_or_else(|e| ngw::exit_spawn_error(&e));
//! let hello = ngw::Hello::new(["greet"]).max_sessions(16);
//! channel.serve(hello, |s: &mut ngw::Session| {
//!     let _ = writeln!(s.stdout(), "hello, {}", s.args_lossy().join(" "));
//!     0
//! }).unwrap();
//! ```
//!
//! The runtime is blocking std I/O: one thread reads the channel (and answers pings at
//! once), writers share it under a lock, and each session runs the handler on a thread of
//! its own. A session's [`Stdin`] asks ngd for input lazily (one `S` when its buffer is
//! empty); its [`Output`]s send `1`/`2` chunks of at most 64 KiB. When the client goes away
//! the session is told ([`Session::hung_up`]), its stdin reads end of file and its output
//! is discarded; the handler's return value is still sent as the session's `X`.
//!
//! Extensions of `docs/ngw.md` §15 are used when the host names them in
//! `NGW_HOST_FEATURES` and the hello asks for them: `mux` ([`Hello::max_sessions`]),
//! `notices` ([`Session::notice`]), `fds` ([`Hello::client_fds`],
//! [`Session::take_client_fds`]), `signals` ([`Hello::signals`], [`Interrupt`],
//! [`Session::stopped`], [`Session::exit_by_signal`]) and `stdin-window`
//! ([`Hello::stdin_window`]).
//!
//! The protocol's vocabulary is `ngw-vocab`'s, shared with ngd and re-exported here: the
//! features ([`WorkerFeature`], [`WorkerFeatures`]), notice kinds ([`NoticeKind`]), the
//! signal names ([`Signal`], [`SignalName`], from `ng-proto`) and what they do
//! ([`SignalEffect`]), the bridges' configuration ([`BridgeConfig`]) and [`RestartPolicy`],
//! the backoff and give-up rules of ngd's pools and of the bridges.
//!
//! A worker whose commands run on the client's own terminal, pipes and files when ngd
//! passes them (our `ng` on ngd's Unix socket), and on the relayed streams otherwise:
//!
//! ```no_run
//! use std::io::Write;
//! let channel = ngw::Channel::from_env().unwrap_or_else(|e| ngw::exit_spawn_error(&e));
//! let hello = ngw::Hello::new(["where"]).client_fds(true).signals(true);
//! channel.serve(hello, |s: &mut ngw::Session| {
//!     match s.take_client_fds().and_then(|mut fds| fds.take(1)) {
//!         Some(fd) => {
//!             let _ = writeln!(std::fs::File::from(fd), "written to the client's own stdout");
//!         }
//!         None => {
//!             let _ = writeln!(s.stdout(), "relayed by ngd");
//!         }
//!     }
//!     0
//! }).unwrap();
//! ```

mod channel;
mod fds;
mod feature;
mod session;
pub mod testing;
mod writer;

pub use channel::{exit_spawn_error, Channel, Error, FdPolicy, Hello, DEFAULT_STDIN_WINDOW};
pub use fds::ClientFds;
pub use feature::Negotiated;
pub use ngw_vocab::signal::Effect as SignalEffect;
pub use ngw_vocab::{
    restart, BridgeConfig, NoticeKind, RestartPolicy, Signal, SignalName, WorkerFeature,
    WorkerFeatures,
};
pub use session::{Interrupt, Output, Session, Stdin};

/// A session handler: runs one command and returns its exit code (0–255).
///
/// Called on a thread of its own per session; with `max_sessions` above 1, concurrently.
pub trait Handler: Send + Sync + 'static {
    /// Runs the session's command.
    fn run(&self, session: &mut Session) -> i32;
}

impl<F> Handler for F
where
    F: Fn(&mut Session) -> i32 + Send + Sync + 'static,
{
    fn run(&self, session: &mut Session) -> i32 {
        self(session)
    }
}
