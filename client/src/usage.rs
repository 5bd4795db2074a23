//! The usage text `ng` prints: for `ng` alone, `--nailgun-help`, and after a bad argument
//! ([`crate::exit::ClientError::BadArguments`]).

/// The usage text, printed on stderr.
pub const USAGE: &str = concat!(
    "NailGun client v",
    env!("CARGO_PKG_VERSION"),
    " (ngd)

Usage: ng COMMAND [--nailgun-options] [ARGS...]
          (run COMMAND, an alias or class name, on the server)
   or: COMMAND [--nailgun-options] [ARGS...]
          (where COMMAND is a symbolic link to ng)

Options, recognised anywhere on the command line and never passed on:
   --nailgun-server HOST       the server: a host name, an IPv4 or IPv6 address
                               ([::1] or ::1), or local:PATH for a Unix socket
                               (default: $NAILGUN_SERVER)
   --nailgun-port PORT         the server's TCP port
                               (default: $NAILGUN_PORT, otherwise 2113)
   --nailgun-filearg FILE      send the whole contents of FILE as the next
                               argument; may be given more than once
   --nailgun-D<NAME>=<VALUE>   set or override an environment variable for the
                               command
   --nailgun-version           print the client version and exit
   --nailgun-showversion       print the client version and continue
   --nailgun-no-autostart      never start ngd (also: NG_NO_AUTOSTART=1)
   --nailgun-help              print this message and exit

With no server and no port given, ng tries ngd's own socket
($XDG_RUNTIME_DIR/ngd/ngd.sock, else /tmp/ngd-$UID/ngd.sock), then 127.0.0.1:2113;
when neither answers, it starts ngd (next to ng, else on PATH) in the background.
"
);
