//! The bytes `ng` sends before the command runs.

use crate::util::{env_value, finish, frame, temp_dir, Chunk, Server};
use std::ffi::OsStr;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::process::{Command, Stdio};

/// 5000 bytes of a file argument: two full `L` pieces and one of 904 bytes.
fn file_contents() -> Vec<u8> {
    (0..5000u32).map(|i| (i % 251) as u8).collect()
}

#[test]
fn header_bytes_are_exact() {
    let dir = temp_dir("header");
    let file = dir.join("arg.bin");
    let contents = file_contents();
    std::fs::write(&file, &contents).unwrap();
    let server = Server::tcp();

    // env(1) sets the environment in the order given, so the order ng forwards is visible;
    // the umask is fixed so that the NGD_CLIENT_UMASK entry is known.
    let mut command = Command::new("/usr/bin/env");
    // SAFETY: umask(2) is async-signal-safe.
    unsafe {
        use std::os::unix::process::CommandExt;
        command.pre_exec(|| {
            libc::umask(0o027);
            Ok(())
        });
    }
    let child = command
        .arg("-i")
        .arg("Z_FIRST=1")
        .arg("A_SECOND=2")
        .arg(OsStr::from_bytes(b"RAW=\xff\xfe"))
        .arg(env!("CARGO_BIN_EXE_ng"))
        .args(&server.args)
        .arg("cmd")
        .arg("a1")
        .arg("")
        .arg(OsStr::from_bytes(b"\xff\x01"))
        .arg("--nailgun-filearg")
        .arg(&file)
        .arg("a2")
        .arg("--nailgun-DZ_FIRST=override")
        .arg("--nailgun-showversion")
        .current_dir(&dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut peer = server.accept();
    let got = peer.raw_header();
    peer.exit("0\n");
    let out = finish(child);

    let mut want = Vec::new();
    want.extend(frame(b'A', b"a1"));
    want.extend(frame(b'A', b""));
    want.extend(frame(b'A', b"\xff\x01"));
    want.extend(frame(b'L', &contents[..2048]));
    want.extend(frame(b'L', &contents[2048..4096]));
    want.extend(frame(b'L', &contents[4096..]));
    want.extend(frame(b'L', b""));
    want.extend(frame(b'A', b"a2"));
    let version = format!("NGD_CLIENT_VERSION={}", env!("CARGO_PKG_VERSION"));
    for e in [
        &b"NAILGUN_FILESEPARATOR=/"[..],
        b"NAILGUN_PATHSEPARATOR=:",
        b"NAILGUN_TTY_0=0",
        b"NAILGUN_TTY_1=0",
        b"NAILGUN_TTY_2=0",
        b"A_SECOND=2",
        b"RAW=\xff\xfe",
        b"Z_FIRST=override",
        b"NGD_CLIENT_UMASK=0027",
        version.as_bytes(),
        // Over TCP no descriptors can pass, so `fds` is not announced.
        b"NGD_CLIENT_FEATURES=signals,winsize,stdin-window",
    ] {
        want.extend(frame(b'E', e));
    }
    want.extend(frame(b'D', dir.as_os_str().as_bytes()));
    want.extend(frame(b'C', b"cmd"));
    assert_eq!(got, want);

    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!(
            "NailGun client version {} (ngd)\n",
            env!("CARGO_PKG_VERSION")
        )
    );
    assert!(out.stderr.is_empty(), "{out:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn filearg_before_the_command_is_the_first_argument() {
    let dir = temp_dir("filearg");
    let file = dir.join("f.txt");
    std::fs::write(&file, b"from a file").unwrap();
    let server = Server::tcp();
    let child = server
        .ng()
        .arg("--nailgun-filearg")
        .arg(&file)
        .args(["cmd", "a"])
        .spawn()
        .unwrap();
    let mut peer = server.accept();
    let header = peer.header();
    peer.exit("0\n");
    assert_eq!(finish(child).status.code(), Some(0));

    let args: Vec<Chunk> = header
        .into_iter()
        .filter(|c| matches!(c.ty, b'A' | b'L' | b'C'))
        .collect();
    assert_eq!(
        args,
        vec![
            Chunk::new(b'L', b"from a file"),
            Chunk::new(b'L', b""),
            Chunk::new(b'A', b"a"),
            Chunk::new(b'C', b"cmd"),
        ]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn empty_filearg_is_just_the_terminator() {
    let dir = temp_dir("empty-filearg");
    let file = dir.join("empty");
    std::fs::write(&file, b"").unwrap();
    let server = Server::tcp();
    let child = server
        .ng()
        .arg("cmd")
        .arg("--nailgun-filearg")
        .arg(&file)
        .spawn()
        .unwrap();
    let mut peer = server.accept();
    let header = peer.header();
    peer.exit("0\n");
    assert_eq!(finish(child).status.code(), Some(0));
    assert_eq!(header[0], Chunk::new(b'L', b""));
    assert_eq!(header[1].ty, b'E');
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn symlink_name_is_the_command_and_every_argument_is_forwarded() {
    let dir = temp_dir("symlink");
    let link = dir.join("my-tool");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_ng"), &link).unwrap();
    let server = Server::tcp();
    let child = Command::new(&link)
        .env_clear()
        .args(["--help", "ng-version"])
        .args(&server.args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut peer = server.accept();
    let header = peer.header();
    peer.exit("0\n");
    assert_eq!(finish(child).status.code(), Some(0));
    let args: Vec<Chunk> = header
        .into_iter()
        .filter(|c| matches!(c.ty, b'A' | b'C'))
        .collect();
    assert_eq!(
        args,
        vec![
            Chunk::new(b'A', b"--help"),
            Chunk::new(b'A', b"ng-version"),
            Chunk::new(b'C', b"my-tool"),
        ]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_link_named_ng_is_still_the_client() {
    let dir = temp_dir("ng-link");
    let link = dir.join("ng");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_ng"), &link).unwrap();
    let server = Server::tcp();
    let child = Command::new(&link)
        .env_clear()
        .args(&server.args)
        .args(["cmd", "x"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut peer = server.accept();
    let header = peer.header();
    peer.exit("0\n");
    assert_eq!(finish(child).status.code(), Some(0));
    assert_eq!(header[0], Chunk::new(b'A', b"x"));
    assert_eq!(header.last().unwrap(), &Chunk::new(b'C', b"cmd"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn nailgun_d_overrides_an_inherited_variable() {
    let server = Server::tcp();
    let child = server
        .ng()
        .env("HOME", "/home/user")
        .env("KEEP", "kept")
        .args(["cmd", "--nailgun-DHOME=/elsewhere", "--nailgun-DNEW=x=y"])
        .spawn()
        .unwrap();
    let mut peer = server.accept();
    let header = peer.header();
    peer.exit("0\n");
    assert_eq!(finish(child).status.code(), Some(0));
    let homes: Vec<_> = crate::util::env_of(&header)
        .into_iter()
        .filter(|e| e.starts_with(b"HOME="))
        .collect();
    assert_eq!(homes, vec![b"HOME=/elsewhere".to_vec()]);
    assert_eq!(env_value(&header, "NEW"), Some(b"x=y".to_vec()));
    assert_eq!(env_value(&header, "KEEP"), Some(b"kept".to_vec()));
    assert!(header
        .iter()
        .all(|c| !c.payload.starts_with(b"--nailgun-D")));
}

#[test]
fn terminal_stdin_is_reported() {
    let (mut master, mut slave) = (-1, -1);
    // SAFETY: openpty writes two descriptors; no name, termios or winsize are asked for.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0, "openpty");
    // SAFETY: both descriptors are new and owned here.
    let (_master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    let server = Server::tcp();
    let child = server
        .ng()
        .arg("cmd")
        .stdin(Stdio::from(slave))
        .spawn()
        .unwrap();
    let mut peer = server.accept();
    let header = peer.header();
    peer.exit("0\n");
    assert_eq!(finish(child).status.code(), Some(0));
    assert_eq!(env_value(&header, "NAILGUN_TTY_0"), Some(b"1".to_vec()));
    assert_eq!(env_value(&header, "NAILGUN_TTY_1"), Some(b"0".to_vec()));
    assert_eq!(env_value(&header, "NAILGUN_TTY_2"), Some(b"0".to_vec()));
}
