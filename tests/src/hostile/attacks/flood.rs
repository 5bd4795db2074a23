//! More connections than the server takes.

use std::io::Write as _;

use ng_testkit::frame;

use crate::hostile::attempt::Attempt;
use crate::hostile::response::{classify, read_response, Seen};
use crate::hostile::{Kind, Outcome};

/// `flood-hold`, `flood-requests`: every attempt of the round connects, waits at the gate
/// until all have, then stays silent (hold) or asks for `ng-true` (requests).
pub(in crate::hostile) fn flood(a: &Attempt<'_>) -> Seen {
    let connected = a.connect();
    if let Some(gate) = a.gate {
        gate.arrive_and_wait(a.deadline);
    }
    let mut s = match connected {
        Ok(s) => s,
        Err(seen) => return seen,
    };
    if a.kind == Kind::FloodRequests {
        if let Err(e) = s.write_all(&frame(b'C', b"ng-true")) {
            let seen = classify(&read_response(&mut s, a.opts()));
            if seen.outcome == Outcome::Closed {
                return Seen::now(Outcome::Closed, format!("write: {e}"));
            }
            return seen;
        }
    }
    classify(&read_response(&mut s, a.opts()))
}
