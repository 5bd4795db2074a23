//! Times the bridge alone, without ngd and the client: the bridge served in this process
//! on a socket pair, driven by `ngw::testing::Driver` (which answers stdin requests at
//! once), against the real plugins from the peers cache. Prints medians per call of
//! `inc --help` (the session and argument parsing, no plugin), `inc` with no input (one
//! plugin round trip), a trivial `inc` with JSON input (plus reading stdin), the same with
//! raw (byte stream) input, and `from ini` of a 1 MB document.
//!
//! Usage: `cargo run --release -p ng-bridge-nu --example nu-hop [CALLS]`. Not a test.

use ngw::testing::{Driver, Request};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Instant;

fn peer(name: &str) -> PathBuf {
    let dir = std::env::var_os("NGD_PEERS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/ngd-peers")
        });
    dir.join("bin").join(name)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let calls: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2000);
    let (ours, theirs) = UnixStream::pair().expect("socket pair");
    let command = vec![
        peer("nu_plugin_inc").into_os_string(),
        peer("nu_plugin_formats").into_os_string(),
    ];
    let config = ngw_vocab::BridgeConfig {
        name: "nu-hop".into(),
        ..Default::default()
    };
    std::thread::spawn(move || {
        let channel = ngw::Channel::from_stream(theirs).host_features("mux,notices");
        ng_bridge_nu::serve(channel, command, &config)
    });
    let mut d = Driver::over(ours).expect("driver");
    let cwd = std::env::current_dir().expect("cwd");
    let inc_json = Request::new("inc", ["--nu-input", "json"])
        .stdin(b"5".to_vec())
        .cwd(&cwd);
    let inc_raw = Request::new("inc", ["--major"])
        .stdin(b"1.2.3".to_vec())
        .cwd(&cwd);
    let mut ini = String::new();
    let mut n = 0;
    while ini.len() < 1_000_000 {
        ini.push_str(&format!("[section{n}]\n"));
        for k in 0..20 {
            ini.push_str(&format!("key{k} = value number {k} of section {n}\n"));
        }
        n += 1;
    }
    let from_ini = Request::new("from", ["ini"])
        .stdin(ini.into_bytes())
        .cwd(&cwd);
    let help = Request::new("inc", ["--help"]).cwd(&cwd);
    let none = Request::new("inc", ["--nu-input", "none"]).cwd(&cwd);
    let mut t_help = Vec::new();
    let mut t_none = Vec::new();
    let mut t_json = Vec::new();
    let mut t_raw = Vec::new();
    for i in 0..calls + 50 {
        let t = Instant::now();
        let o = d.run(&help).expect("run");
        let h = t.elapsed().as_secs_f64();
        assert_eq!(o.code, 0, "{}", o.stderr_str());
        let t = Instant::now();
        d.run(&none).expect("run");
        let n = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let o = d.run(&inc_json).expect("run");
        let a = t.elapsed().as_secs_f64();
        assert_eq!(o.stdout_str(), "6\n", "{}", o.stderr_str());
        let t = Instant::now();
        let o = d.run(&inc_raw).expect("run");
        let b = t.elapsed().as_secs_f64();
        assert_eq!(o.stdout_str(), "2.0.0\n", "{}", o.stderr_str());
        if i >= 50 {
            t_help.push(h);
            t_none.push(n);
            t_json.push(a);
            t_raw.push(b);
        }
    }
    let mut t_ini = Vec::new();
    for _ in 0..(calls / 200).max(5) {
        let t = Instant::now();
        let o = d.run(&from_ini).expect("run");
        t_ini.push(t.elapsed().as_secs_f64());
        assert_eq!(o.code, 0, "{}", o.stderr_str());
    }
    println!("inc --help           {:8.1} us", median(t_help) * 1e6);
    println!("inc --nu-input none  {:8.1} us", median(t_none) * 1e6);
    println!("inc --nu-input json  {:8.1} us", median(t_json) * 1e6);
    println!("inc --major (raw)    {:8.1} us", median(t_raw) * 1e6);
    println!("from ini (1 MB)      {:8.2} ms", median(t_ini) * 1e3);
}
