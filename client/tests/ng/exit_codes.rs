//! Exit codes: the command's, passed through `& 0xFF`, and the client's own 226–231.
//!
//! Together these pin the whole set: 226 bad arguments, 227 connection broken, 229
//! unexpected chunk, 230 connect failed, 231 socket failed, 141 broken stdout pipe (in
//! `output.rs`), 0 for usage and version (in `cli.rs`).

use crate::util::{code, exchange, finish, frame, ng, temp_dir, Server};
use std::net::TcpListener;

fn exit_status(payload: &str) -> i32 {
    let (_, out) = exchange(&["cmd"], &frame(b'X', payload.as_bytes()));
    assert!(out.stderr.is_empty(), "{out:?}");
    code(&out)
}

#[test]
fn exit_code_passes_through() {
    assert_eq!(exit_status("0\n"), 0);
    assert_eq!(exit_status("42\n"), 42);
    assert_eq!(exit_status("255"), 255);
}

#[test]
fn exit_payload_is_parsed_like_atoi() {
    assert_eq!(exit_status(" 7x"), 7);
    assert_eq!(exit_status(""), 0);
    assert_eq!(exit_status("\t-0\r\n"), 0);
    assert_eq!(exit_status("x5"), 0);
}

#[test]
fn exit_code_keeps_the_low_eight_bits() {
    assert_eq!(exit_status("898"), 130);
    assert_eq!(exit_status("899\n"), 131);
    assert_eq!(exit_status("-1\n"), 255);
    assert_eq!(exit_status("300"), 44);
}

#[test]
fn first_exit_wins_and_the_rest_is_ignored() {
    let mut reply = frame(b'1', b"before\n");
    reply.extend(frame(b'X', b"3\n"));
    reply.extend(frame(b'1', b"after\n"));
    reply.extend(frame(b'X', b"4\n"));
    reply.extend(frame(b'Z', b"junk"));
    let (_, out) = exchange(&["cmd"], &reply);
    assert_eq!(code(&out), 3);
    assert_eq!(out.stdout, b"before\n");
    assert!(out.stderr.is_empty(), "{out:?}");
}

#[test]
fn exit_split_across_reads_still_parses() {
    let server = Server::tcp();
    let child = server.ng().arg("cmd").spawn().unwrap();
    let mut peer = server.accept();
    peer.header();
    let x = frame(b'X', b"17\n");
    for byte in x.chunks(1) {
        peer.send_raw(byte);
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(code(&finish(child)), 17);
}

#[test]
fn unexpected_chunk_type_is_229_after_earlier_output() {
    let mut reply = frame(b'1', b"out\n");
    reply.extend(frame(b'Z', b""));
    let (_, out) = exchange(&["cmd"], &reply);
    assert_eq!(code(&out), 229);
    assert_eq!(out.stdout, b"out\n");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "Unexpected chunk type 90 ('Z')\n"
    );
}

#[test]
fn client_chunk_types_from_a_server_are_unexpected() {
    let (_, out) = exchange(&["cmd"], &frame(b'A', b"x"));
    assert_eq!(code(&out), 229);
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "Unexpected chunk type 65 ('A')\n"
    );
}

#[test]
fn close_before_exit_is_227() {
    let (_, out) = exchange(&["cmd"], &frame(b'2', b"err only\n"));
    assert_eq!(code(&out), 227);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let mut lines = stderr.lines();
    assert_eq!(lines.next(), Some("err only"));
    let message = lines.next().unwrap();
    assert!(message.starts_with("recv: "), "{stderr}");
    assert_eq!(lines.next(), None, "one line only: {stderr}");
}

#[test]
fn close_in_the_middle_of_a_chunk_is_227() {
    let mut reply = frame(b'1', b"0123456789");
    reply.truncate(9);
    let (_, out) = exchange(&["cmd"], &reply);
    assert_eq!(code(&out), 227);
    assert_eq!(out.stdout, b"0123");
}

#[test]
fn nothing_listening_is_230() {
    // Bind and drop to get a port that was free a moment ago.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = finish(
        ng().args(["--nailgun-port", &port.to_string(), "cmd"])
            .spawn()
            .unwrap(),
    );
    assert_eq!(code(&out), 230);
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "connect: Connection refused\n"
    );
}

#[test]
fn missing_socket_file_is_230() {
    let dir = temp_dir("nosock");
    let out = finish(
        ng().arg("--nailgun-server")
            .arg(format!("local:{}/ngd.sock", dir.display()))
            .arg("cmd")
            .spawn()
            .unwrap(),
    );
    assert_eq!(code(&out), 230);
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "connect: No such file or directory\n"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn socket_path_too_long_is_231() {
    let path = format!("/tmp/{}", "p".repeat(120));
    let out = finish(
        ng().args(["--nailgun-server", &format!("local:{path}"), "cmd"])
            .spawn()
            .unwrap(),
    );
    assert_eq!(code(&out), 231);
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!("Socket path [{path}] too long (125)\n")
    );
}

#[test]
fn missing_option_value_is_226_with_usage() {
    for option in ["--nailgun-port", "--nailgun-server", "--nailgun-filearg"] {
        let out = finish(ng().args(["cmd", option]).spawn().unwrap());
        assert_eq!(code(&out), 226, "{option}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.starts_with(&format!("ng: {option} needs a value\n")),
            "{stderr}"
        );
        assert!(stderr.contains("Usage: ng"), "{stderr}");
        assert!(out.stdout.is_empty());
    }
}

#[test]
fn no_command_is_226() {
    let out = finish(ng().args(["--nailgun-port", "1"]).spawn().unwrap());
    assert_eq!(code(&out), 226);
    assert!(String::from_utf8_lossy(&out.stderr).contains("no command"));
}

#[test]
fn invalid_port_is_226() {
    let out = finish(
        ng().args(["--nailgun-port", "http", "cmd"])
            .spawn()
            .unwrap(),
    );
    assert_eq!(code(&out), 226);
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("ng: invalid port: http\n"));
}

#[test]
fn unreadable_filearg_is_227_and_never_connects() {
    let server = Server::tcp();
    let out = finish(
        server
            .ng()
            .args(["cmd", "--nailgun-filearg", "/nonexistent/ng-file"])
            .spawn()
            .unwrap(),
    );
    assert_eq!(code(&out), 227);
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "--nailgun-filearg: /nonexistent/ng-file: No such file or directory\n"
    );
    assert!(server
        .try_accept(std::time::Duration::from_millis(100))
        .is_none());
}
