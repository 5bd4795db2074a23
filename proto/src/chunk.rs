//! Chunk types and decoded chunks.
//!
//! A [`ChunkType`] is any byte: the decoder accepts every type byte and leaves it to the
//! session machines to decide what a type means in their state. That is what the reference
//! server does (it skips unknown types before `C`), and it lets the ngw worker channel add its
//! own lowercase control types without a second codec.

use bytes::Bytes;
use std::fmt;

/// The one-byte type of a chunk.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChunkType(pub u8);

impl ChunkType {
    /// `A`: one command-line argument (client to server, before `C`).
    pub const ARGUMENT: Self = Self(b'A');
    /// `E`: one environment entry, `NAME=VALUE` (client to server, before `C`).
    pub const ENVIRONMENT: Self = Self(b'E');
    /// `D`: the client's working directory (client to server, before `C`).
    pub const WORKING_DIR: Self = Self(b'D');
    /// `C`: the command; ends the header phase (client to server).
    pub const COMMAND: Self = Self(b'C');
    /// `L`: a piece of a long argument read from a file; an empty `L` ends the argument
    /// (client to server, before `C`).
    pub const LONG_ARG: Self = Self(b'L');
    /// `0`: stdin bytes (client to server, one chunk per `S`).
    pub const STDIN: Self = Self(b'0');
    /// `.`: stdin reached end of file (client to server).
    pub const STDIN_EOF: Self = Self(b'.');
    /// `H`: heartbeat (client to server, tolerated anywhere).
    pub const HEARTBEAT: Self = Self(b'H');
    /// `1`: stdout bytes (server to client).
    pub const STDOUT: Self = Self(b'1');
    /// `2`: stderr bytes (server to client).
    pub const STDERR: Self = Self(b'2');
    /// `S`: the server asks for one chunk of stdin (server to client).
    pub const SEND_INPUT: Self = Self(b'S');
    /// `X`: exit code as ASCII decimal (server to client); the first one ends the session.
    pub const EXIT: Self = Self(b'X');

    /// `F`: the features the server honours in this session (server to client, only to a
    /// client that announced `NGD_CLIENT_FEATURES`; the first chunk of the session).
    pub const FEATURES: Self = Self(b'F');
    /// `K`: a signal name for the command (client to server, after `F` named `signals`).
    pub const SIGNAL: Self = Self(b'K');
    /// `W`: the client's terminal changed size (client to server, after `F` named
    /// `winsize`).
    pub const WINDOW_SIZE: Self = Self(b'W');
    /// `Z`: the command stopped itself with this signal; the client stops too (server to
    /// client, after `F` named `signals`).
    pub const STOPPED: Self = Self(b'Z');
    /// `P`, empty (`ctty`): server to client, before `F`, to a client that offered a
    /// pseudo-terminal: send it. Client to server, the answer: the slave rides with it
    /// (`SCM_RIGHTS`), or nothing does when the client could not open one.
    pub const PTY: Self = Self(b'P');

    /// `h`: ngw worker hello (worker to ngd), sent once before any session.
    pub const WORKER_HELLO: Self = Self(b'h');
    /// `i`: ngw interrupt (ngd to worker): the client is gone, or a signal name.
    pub const WORKER_INTERRUPT: Self = Self(b'i');
    /// `p`: ngw ping (ngd to worker): between sessions, or any time to a `mux` worker.
    pub const WORKER_PING: Self = Self(b'p');
    /// `o`: ngw pong (worker to ngd), the answer to `p`.
    pub const WORKER_PONG: Self = Self(b'o');
    /// `q`: ngw quit (ngd to worker): finish and exit.
    pub const WORKER_QUIT: Self = Self(b'q');
    /// `s`: ngw session select (both ways, `mux` workers only): the following session
    /// chunks in that direction belong to the session whose id is the payload.
    pub const WORKER_SELECT: Self = Self(b's');
    /// `n`: ngw notice (worker to ngd, `notices` workers only): a JSON object saying what
    /// happened (a fallback, stale code, retiring).
    pub const WORKER_NOTICE: Self = Self(b'n');
    /// `t`: ngw descriptors answer (worker to ngd, `fds` workers only): empty when the
    /// session runs on the client's descriptors, `relay` when it declined them.
    pub const WORKER_TAKEN: Self = Self(b't');
    /// `z`: ngw stopped (worker to ngd, `signals` workers only): the command stopped
    /// itself with the signal named in the payload.
    pub const WORKER_STOPPED: Self = Self(b'z');

    /// True for the twelve types of the Nailgun protocol proper.
    pub fn is_nailgun(self) -> bool {
        matches!(
            self,
            Self::ARGUMENT
                | Self::ENVIRONMENT
                | Self::WORKING_DIR
                | Self::COMMAND
                | Self::LONG_ARG
                | Self::STDIN
                | Self::STDIN_EOF
                | Self::HEARTBEAT
                | Self::STDOUT
                | Self::STDERR
                | Self::SEND_INPUT
                | Self::EXIT
        )
    }

    /// A short human name, for logs and error messages.
    pub fn name(self) -> &'static str {
        match self {
            Self::ARGUMENT => "argument",
            Self::ENVIRONMENT => "environment",
            Self::WORKING_DIR => "working-directory",
            Self::COMMAND => "command",
            Self::LONG_ARG => "long-argument",
            Self::STDIN => "stdin",
            Self::STDIN_EOF => "stdin-eof",
            Self::HEARTBEAT => "heartbeat",
            Self::STDOUT => "stdout",
            Self::STDERR => "stderr",
            Self::SEND_INPUT => "send-input",
            Self::EXIT => "exit",
            Self::FEATURES => "features",
            Self::SIGNAL => "signal",
            Self::WINDOW_SIZE => "window-size",
            Self::STOPPED => "stopped",
            Self::PTY => "pty",
            Self::WORKER_HELLO => "worker-hello",
            Self::WORKER_INTERRUPT => "worker-interrupt",
            Self::WORKER_PING => "worker-ping",
            Self::WORKER_PONG => "worker-pong",
            Self::WORKER_QUIT => "worker-quit",
            Self::WORKER_SELECT => "worker-select",
            Self::WORKER_NOTICE => "worker-notice",
            _ => "unknown",
        }
    }
}

impl fmt::Debug for ChunkType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_ascii_graphic() {
            write!(f, "'{}'", self.0 as char)
        } else {
            write!(f, "0x{:02x}", self.0)
        }
    }
}

impl fmt::Display for ChunkType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({:?})", self.name(), self)
    }
}

/// One whole decoded chunk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chunk {
    /// The type byte.
    pub ty: ChunkType,
    /// The payload, a zero-copy slice of the read buffer.
    pub payload: Bytes,
}

impl Chunk {
    /// A chunk of the given type and payload.
    pub fn new(ty: ChunkType, payload: impl Into<Bytes>) -> Self {
        Self {
            ty,
            payload: payload.into(),
        }
    }
}
