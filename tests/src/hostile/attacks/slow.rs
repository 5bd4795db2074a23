//! Clients that connect and then say nothing, or too little too slowly.

use std::time::Duration;

use ng_testkit::frame;

use crate::hostile::attempt::Attempt;
use crate::hostile::response::Seen;
use crate::hostile::Outcome;

/// `slowloris`: connect, then silence.
pub(in crate::hostile) fn slowloris(a: &Attempt<'_>) -> Seen {
    a.send_then_judge(b"")
}

/// `slowloris-trickle`: a valid header, one byte every 50 ms.
pub(in crate::hostile) fn slowloris_trickle(a: &Attempt<'_>) -> Seen {
    let mut whole = Vec::new();
    for _ in 0..20 {
        whole.extend(frame(b'A', b"trickle"));
    }
    whole.extend(frame(b'C', b"ng-true"));
    a.trickle(
        &[],
        |k| whole.get(k).map(|b| vec![*b]).unwrap_or_default(),
        Duration::from_millis(50),
    )
}

/// `heartbeats-only`: an `H` every 100 ms, and never a `C`.
pub(in crate::hostile) fn heartbeats_only(a: &Attempt<'_>) -> Seen {
    a.trickle(
        &frame(b'H', b""),
        |_| frame(b'H', b""),
        Duration::from_millis(100),
    )
}

/// `connect-close`: connect and close at once, every other time with a reset.
pub(in crate::hostile) fn connect_close(a: &Attempt<'_>) -> Seen {
    match a.connect() {
        Ok(s) => {
            if a.index % 2 == 1 {
                s.set_linger_zero();
            }
            drop(s);
            Seen::now(Outcome::Dropped, "closed at once")
        }
        Err(seen) => seen,
    }
}
