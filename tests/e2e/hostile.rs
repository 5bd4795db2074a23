//! Hostile clients against the `ngd` binary, the bounded form.
//!
//! One test per attack kind in `ng_tests::hostile` (the library has the attacks and the
//! judging; `docs/reliability.md` has the full-form matrix). Each test starts its own `ngd`
//! on loopback TCP and a Unix socket with short limits (`Limits::short()`: header and
//! heartbeat timeouts 1 s, 32 connections, 4 MiB headers) and glibc's allocator pinned
//! (`MALLOC_ENV`, so RSS follows live memory), warms it up, fires the kind twice, eight at
//! once, alternating transports, and then requires that every attempt got what
//! `docs/protocol.md` promises in time, that `ng-true` still answers promptly, and that the
//! server's descriptors, RSS and CPU are back to their baseline. A failure prints the
//! kind's matrix row, every failed check and the server's log.
//!
//! `all_kinds_have_a_test` keeps this list and `Kind::ALL` in step; `runner_prints_the_matrix`
//! runs the `ng-hostile` binary itself on two quick kinds.

use std::process::Command;
use std::time::Instant;

use ng_tests::hostile::{self, Kind, Limits, Plan, Target};
use ng_tests::{Flavor, NgdServer};

/// An `ngd` with short limits and a pinned allocator, and the target that describes it.
fn start_server() -> (NgdServer, Target) {
    hostile::raise_fd_limit();
    let limits = Limits::short();
    let mut builder = NgdServer::builder(Flavor::Ngd).tcp().unix();
    for line in limits.config_lines() {
        builder = builder.config_line(line);
    }
    for (name, value) in hostile::MALLOC_ENV {
        builder = builder.env(name, value);
    }
    let server = builder.start();
    let target = Target {
        addresses: server.addresses().to_vec(),
        pid: server.pid(),
        limits,
    };
    (server, target)
}

fn attack(kind: Kind) {
    let started = Instant::now();
    let (server, target) = start_server();
    let plan = Plan::bounded();
    let baseline = hostile::warm_up(&target, &plan)
        .unwrap_or_else(|e| panic!("{e}\n{}", ng_tests::Server::log(&server)));
    let report = hostile::run_kind(&target, kind, &plan, &baseline);
    let table = hostile::matrix(std::slice::from_ref(&report), false);
    eprintln!(
        "{kind}: {}\n{table}(warm-up baseline {} fds, {} KiB; {:.1?} in all)",
        kind.what(),
        baseline.fds,
        baseline.rss_kib,
        started.elapsed()
    );
    assert!(
        report.passed(),
        "{kind} ({}) failed:\n{table}\n{}\n{}",
        kind.what(),
        hostile::failure_details(std::slice::from_ref(&report)),
        ng_tests::Server::log(&server)
    );
}

macro_rules! kinds {
    ($($test:ident => $kind:ident,)*) => {
        $(
            #[test]
            fn $test() {
                attack(Kind::$kind);
            }
        )*

        const TESTED: &[Kind] = &[$(Kind::$kind),*];
    };
}

kinds! {
    length_2_pow_31 => Length2p31,
    length_2_pow_32_minus_1 => Length2p32m1,
    cut_mid_header => CutMidHeader,
    cut_mid_payload => CutMidPayload,
    cut_mid_stdin => CutMidStdin,
    unknown_before_command => UnknownBeforeCommand,
    unknown_after_command => UnknownAfterCommand,
    stdin_before_credit => StdinBeforeCredit,
    stdin_after_eof => StdinAfterEof,
    env_without_equals => EnvWithoutEquals,
    non_utf8_header => NonUtf8Header,
    non_utf8_command => NonUtf8Command,
    args_100k => Args100k,
    header_too_large => HeaderTooLarge,
    arg_64_mib => Arg64MiB,
    no_command => NoCommand,
    slowloris => Slowloris,
    slowloris_trickle => SlowlorisTrickle,
    connect_close => ConnectClose,
    rst_mid_output => RstMidOutput,
    heartbeats_only => HeartbeatsOnly,
    never_reads => NeverReads,
    never_reads_finished => NeverReadsFinished,
    never_reads_alive => NeverReadsAlive,
    junk_after_exit => JunkAfterExit,
    flood_hold => FloodHold,
    flood_requests => FloodRequests,
}

#[test]
fn all_kinds_have_a_test() {
    assert_eq!(TESTED, Kind::ALL, "a kind was added without a test here");
}

#[test]
fn runner_prints_the_matrix() {
    let (server, target) = start_server();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ng-hostile"));
    for address in &target.addresses {
        cmd.arg("--server").arg(address.to_string());
    }
    let config = server.dir().join("ngd-test.toml");
    cmd.arg("--pid")
        .arg(target.pid.to_string())
        .arg("--config")
        .arg(&config)
        .args(["--rounds", "1", "--concurrency", "4", "--markdown"])
        .args(["--kinds", "length-2^31,connect-close"]);
    let out = cmd.output().expect("run ng-hostile");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success()
            && stdout.contains("| `length-2^31` | 4 (2+2) | refused 76 ×4 |")
            && stdout.contains("| `connect-close` | 4 (2+2) | dropped ×4 |")
            && stdout.contains("every kind passed")
            && !stderr.contains("warning"),
        "ng-hostile {}\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}\n{}",
        out.status,
        ng_tests::Server::log(&server)
    );
}
