//! The terminal path through a pseudo-terminal opened here: dialoguer prompts driven with
//! keys (arrows, space, Enter, Ctrl-C) in the prompt helper, and indicatif progress seen on
//! the screen.

#[path = "common/pty.rs"]
mod pty;

use ng_bridge_fledge::protocol::{Progress, Question, Validator};
use ng_bridge_fledge::ui::{Helper, ProgressView, TermUi, Ui, UiError};
use serde_json::{json, Value};
use std::ffi::OsString;
use std::fs::File;
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

/// A pty of 80 × 24 whose slave side is handed to the UI.
struct Pty {
    pty: pty::Pty,
}

impl Pty {
    fn open() -> Self {
        Self {
            pty: pty::Pty::open(80, 24),
        }
    }

    fn text(&self) -> String {
        self.pty.text()
    }

    fn wait_for(&self, what: &str) {
        self.pty.wait_for(what, 0);
    }

    fn keys(&mut self, k: &[u8]) {
        self.pty.keys(k, 80);
    }

    fn ui(&mut self) -> TermUi {
        let helper = Helper {
            program: env!("CARGO_BIN_EXE_ng-bridge-fledge").into(),
            args: ["bridge", "fledge-v1", "--"].map(OsString::from).to_vec(),
        };
        TermUi::new(self.pty.slave.take().unwrap(), helper, std::env::temp_dir())
    }
}

/// Asks `q` on a fresh pty, typing `keys` once `shown` is on screen.
fn ask(q: Question, shown: &str, keys: &[&[u8]]) -> (Result<Value, UiError>, String) {
    let mut pty = Pty::open();
    let mut ui = pty.ui();
    let asking = std::thread::spawn(move || ui.ask(&q));
    pty.wait_for(shown);
    for k in keys {
        pty.keys(k);
    }
    let r = asking.join().unwrap();
    (r, pty.text())
}

#[test]
fn prompt_with_a_default_and_a_validator() {
    let q = Question::Prompt {
        message: "Deploy target:".into(),
        default: Some("staging".into()),
        validate: None,
    };
    let (r, screen) = ask(q.clone(), "Deploy target:", &[b"\r"]);
    assert_eq!(r, Ok(json!("staging")));
    assert!(screen.contains("staging"), "{screen}");
    let (r, _) = ask(q, "Deploy target:", &[b"prod\r"]);
    assert_eq!(r, Ok(json!("prod")));
    let q = Question::Prompt {
        message: "Count".into(),
        default: None,
        validate: Some(Validator::Integer),
    };
    let (r, screen) = ask(q, "Count", &[b"abc\r", b"\x7f\x7f\x7f12\r"]);
    assert_eq!(r, Ok(json!("12")));
    assert!(screen.contains("Must be an integer"), "{screen}");
}

#[test]
fn confirm_select_and_multi_select_with_keys() {
    let (r, _) = ask(
        Question::Confirm {
            message: "Deploy to production?".into(),
            default: false,
        },
        "Deploy to production?",
        &[b"y"],
    );
    assert_eq!(r, Ok(json!(true)));
    let (r, screen) = ask(
        Question::Select {
            message: "Choose environment:".into(),
            options: vec!["dev".into(), "staging".into(), "production".into()],
            default: Some(1),
        },
        "production",
        &[b"\x1b[B", b"\r"],
    );
    assert_eq!(r, Ok(json!("production")), "{screen}");
    let (r, screen) = ask(
        Question::MultiSelect {
            message: "Select regions:".into(),
            options: vec![
                "us-east-1".into(),
                "eu-west-1".into(),
                "ap-southeast-1".into(),
            ],
            defaults: vec![0],
        },
        "ap-southeast-1",
        &[b"\x1b[B", b"\x1b[B", b" ", b"\r"],
    );
    assert_eq!(r, Ok(json!(["us-east-1", "ap-southeast-1"])), "{screen}");
}

#[test]
fn ctrl_c_at_a_prompt_is_an_interrupt() {
    let (r, _) = ask(
        Question::Select {
            message: "Choose:".into(),
            options: vec!["a".into(), "b".into()],
            default: None,
        },
        "Choose:",
        &[b"\x03"],
    );
    assert_eq!(r, Err(UiError::Interrupted));
}

#[test]
fn an_abandoned_prompt_is_closed() {
    let mut pty = Pty::open();
    let mut ui = pty.ui();
    let abort = ui.aborter();
    let asking = std::thread::spawn(move || {
        ui.ask(&Question::Prompt {
            message: "Never answered".into(),
            default: None,
            validate: None,
        })
    });
    pty.wait_for("Never answered");
    abort();
    assert!(matches!(asking.join().unwrap(), Err(UiError::Failed(_))));
}

/// A clonable writer on the pty's slave side.
#[derive(Clone, Debug)]
struct Slave(Arc<File>);

impl Write for Slave {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        (&*self.0).write(b)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        (&*self.0).flush()
    }
}

#[test]
fn a_progress_bar_is_seen_on_the_screen() {
    let mut pty = Pty::open();
    let slave = Slave(Arc::new(File::from(pty.pty.slave.take().unwrap())));
    let mut view = ProgressView::on_output(slave, 80, true);
    for i in 0..=3 {
        view.show(&Progress::Bar {
            message: "Uploading artifacts (fledge-deploy)".into(),
            current: i,
            total: 3,
        });
        std::thread::sleep(Duration::from_millis(120));
    }
    pty.wait_for("3/3");
    let screen = pty.text();
    assert!(
        screen.contains("Uploading artifacts (fledge-deploy) ["),
        "{screen}"
    );
    assert!(
        screen.contains("==============================] 3/3"),
        "{screen}"
    );
    view.show(&Progress::Clear);
    view.show(&Progress::Spinner {
        message: "Thinking (p)".into(),
    });
    pty.wait_for("Thinking (p)");
    drop(view);
}
