//! Our client's own options and fixes, where it deliberately differs from the reference
//! C client (nailgun.md §3.2, §8.9): `--nailgun-filearg` before the command,
//! `--nailgun-D`, IPv6. Ours only: the C client has the bugs these tests rule out.

use std::net::{Ipv6Addr, SocketAddr};

use ng_tests::data;
use ng_tests::{eqnice, Client, Dump, FakeServer, JavaServer, Nail, Reply, Server, Transport};

/// A file bigger than one 2 KiB `L` piece, with every byte value.
fn filearg_file() -> (tempfile::NamedTempFile, Vec<u8>) {
    let file = tempfile::NamedTempFile::new().unwrap();
    let content = data::binary(5000);
    std::fs::write(file.path(), &content).unwrap();
    (file, content)
}

/// `--nailgun-filearg FILE` before the command does not make FILE the command (the C
/// client's bug): the nail runs. The reference server drops `L` chunks, so the nail sees only the ordinary
/// arguments.
#[test]
fn filearg_before_the_command_runs_the_command() {
    let server = JavaServer::shared(Transport::Tcp);
    let (file, _) = filearg_file();
    let out = Client::Ours
        .cmd()
        .server(server.address())
        .arg("--nailgun-filearg")
        .arg(file.path())
        .arg(server.command(Nail::Dump))
        .args(["a", "b"])
        .run();
    out.assert_success();
    assert_eq!(Dump::parse(&out.stdout).args, ["a", "b"], "{out:?}");
}

/// On the wire, the file goes out as `L` pieces ended by an empty `L`, in the argument
/// position where the option stood: before the command's arguments, or between them.
#[test]
fn filearg_is_sent_as_l_chunks_in_place() {
    let fake = FakeServer::tcp("127.0.0.1:0".parse().unwrap())
        .unwrap()
        .record(Reply::stdout("", 0));
    let (file, content) = filearg_file();
    for (args, shape_before_env) in [
        (vec!["--nailgun-filearg", "FILE", "cmd", "a", "b"], "L*AA"),
        (vec!["cmd", "a", "--nailgun-filearg", "FILE", "b"], "AL*A"),
    ] {
        let args: Vec<_> = args
            .into_iter()
            .map(|a| {
                if a == "FILE" {
                    file.path().as_os_str().to_owned()
                } else {
                    a.into()
                }
            })
            .collect();
        let out = Client::Ours.cmd().server(fake.address()).args(&args).run();
        out.assert_success();
        let request = fake.requests().pop().expect("a request");
        assert_eq!(request.command().as_deref(), Some("cmd"), "{request:?}");
        assert_eq!(request.args(), ["a", "b"], "{request:?}");
        assert_eq!(
            request.fileargs(),
            std::slice::from_ref(&content),
            "{request:?}"
        );
        // Collapse the run of L pieces to `L*` and cut at the first E.
        let shape = request.shape();
        let header = shape.split('E').next().unwrap();
        let mut collapsed = String::new();
        for c in header.chars() {
            if c == 'L' {
                if !collapsed.ends_with("L*") {
                    collapsed.push_str("L*");
                }
            } else {
                collapsed.push(c);
            }
        }
        eqnice!(
            shape_before_env,
            collapsed,
            "full shape {shape}, args {args:?}"
        );
    }
}

/// `--nailgun-D<name>=<value>` sets a variable for the nail, overriding the client's own,
/// wherever it appears, and is not passed on as an argument.
#[test]
fn nailgun_d_sets_and_overrides_env() {
    for transport in Transport::ALL {
        let server = JavaServer::shared(transport);
        let out = Client::Ours
            .cmd()
            .server(server.address())
            .env("NG_T_OVERRIDE", "old")
            .arg("--nailgun-DNG_T_SET=from option")
            .arg("--nailgun-DNG_T_OVERRIDE=new")
            .arg(server.command(Nail::Dump))
            .arg("x")
            .arg("--nailgun-DNG_T_LATE=a=b")
            .run();
        out.assert_success();
        let dump = Dump::parse(&out.stdout);
        assert_eq!(dump.args, ["x"], "{out:?}");
        for (name, value) in [
            ("NG_T_SET", "from option"),
            ("NG_T_OVERRIDE", "new"),
            ("NG_T_LATE", "a=b"),
        ] {
            assert_eq!(
                dump.env.get(name).map(String::as_str),
                Some(value),
                "{name}\n{out:?}"
            );
        }
    }
}

/// An IPv6 server, named as `[::1]` or `::1`. The 0.9.3 Java server cannot bind IPv6
/// literals (its address parser splits on `:`), so the peer is the in-test fake.
#[test]
fn ipv6_loopback() {
    let bind = SocketAddr::from((Ipv6Addr::LOCALHOST, 0));
    let fake = FakeServer::tcp(bind)
        .unwrap_or_else(|e| {
            panic!("cannot bind [::1] on this machine ({e}); the IPv6 test needs IPv6 loopback")
        })
        .record(Reply::stdout("hello over IPv6\n", 7));
    let port = fake.address().port().unwrap().to_string();
    for host in ["[::1]", "::1"] {
        let out = Client::Ours
            .cmd()
            .args(["--nailgun-server", host, "--nailgun-port", &port])
            .args(["cmd", "arg"])
            .run();
        out.assert_code(7);
        eqnice!("hello over IPv6\n", out.stdout_text(), "{host}\n{out:?}");
        let request = fake.requests().pop().expect("a request");
        assert_eq!(request.command().as_deref(), Some("cmd"), "{request:?}");
        assert_eq!(request.args(), ["arg"], "{request:?}");
    }
}
