//! `ng-bridge-fledge`: the fledge bridge as a program of its own, for tests and for running
//! without ngd's dispatcher. Accepts ngd's argument shape, `... -- <command...>`, and the
//! configuration in `NGW_BRIDGE_CONFIG`.

use std::ffi::OsString;

fn main() {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let command = match args.iter().position(|a| a == "--") {
        Some(i) => args[i + 1..].to_vec(),
        None => args,
    };
    let config = match ngw_vocab::BridgeConfig::from_env() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("ng-bridge-fledge: {e}");
            std::process::exit(2);
        }
    };
    std::process::exit(ng_bridge_fledge::run(command, config));
}
