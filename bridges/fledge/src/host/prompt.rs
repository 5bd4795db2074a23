//! The glue between a run and [`crate::ui`]: which [`Ui`] a session's questions are
//! asked on ([`choose_ui`]), and the thread asking them ([`Asker`]).

use crate::protocol::{Event, Question};
use crate::streams::Streams;
use crate::ui::{Helper, LineUi, TermUi, Ui, UiError};
use crossbeam_channel::{unbounded, Sender};
use std::io::{BufRead, BufReader};

/// How questions are asked. On the client's descriptors with a terminal on fd 0:
/// fledge's own prompts on that terminal ([`TermUi`]: keys from fd 0, drawn on fd 2,
/// or on fd 0 when fd 2 is not a terminal). On the client's descriptors without one:
/// line prompts on fd 2 answered from fd 0. Relayed: line prompts on the session's
/// stderr answered from its stdin (a relayed session has no terminal to draw on).
pub(super) fn choose_ui(session: &mut ngw::Session, streams: &Streams) -> Box<dyn Ui> {
    let cwd = session.cwd.clone();
    if !streams.on_client() {
        let input = BufReader::new(session.take_stdin());
        return Box::new(LineUi::new(input, streams.err.clone(), streams.tty[0], cwd));
    }
    if streams.tty[0] {
        let out = if streams.tty[2] { 2 } else { 0 };
        if let (Some(input), Some(output), Some(helper)) =
            (streams.dup(0), streams.dup(out), Helper::current())
        {
            return Box::new(TermUi::split(input, output, helper, cwd).client_env(&session.env));
        }
    }
    let input: Box<dyn BufRead + Send> = match streams.dup(0) {
        Some(fd) => Box::new(BufReader::new(std::fs::File::from(fd))),
        None => Box::new(std::io::empty()),
    };
    Box::new(LineUi::new(input, streams.err.clone(), streams.tty[0], cwd))
}

/// Asks the plugin's questions on a thread of its own (so a question can be abandoned),
/// started at the first question: most runs ask none.
pub(super) enum Asker {
    /// No question yet: the UI, and where answers go.
    Idle(Box<dyn Ui>, Sender<Event>),
    /// The thread asking, fed questions in order.
    Asking(Sender<(String, Question)>),
    /// The thread could not be started: every question fails.
    Failed(Sender<Event>, String),
}

impl Asker {
    /// Asks `question` (request `id`); its answer arrives as an [`Event`].
    pub fn ask(&mut self, id: String, question: Question) {
        match self {
            Asker::Asking(tx) => {
                let _ = tx.send((id, question));
            }
            Asker::Failed(done, why) => {
                let _ = done.send(Event::Done {
                    id,
                    result: Err(why.clone()),
                });
            }
            Asker::Idle(..) => {
                self.start();
                self.ask(id, question);
            }
        }
    }

    /// Starts the asking thread: `Idle` becomes `Asking`, or `Failed`.
    fn start(&mut self) {
        let (tx, rx) = unbounded::<(String, Question)>();
        let Asker::Idle(mut ui, done) = std::mem::replace(self, Asker::Asking(tx)) else {
            return;
        };
        let answers = done.clone();
        let started = std::thread::Builder::new()
            .name("fledge-ui".into())
            .spawn(move || {
                for (id, q) in rx {
                    let event = match ui.ask(&q) {
                        Ok(v) => Event::Done { id, result: Ok(v) },
                        Err(UiError::Interrupted) => Event::Interrupt,
                        Err(UiError::Failed(e)) => Event::Done { id, result: Err(e) },
                    };
                    if answers.send(event).is_err() {
                        return;
                    }
                }
            });
        if let Err(e) = started {
            *self = Asker::Failed(done, format!("cannot start the prompt thread: {e}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    /// Answers every question with its own message.
    struct Echo;

    impl Ui for Echo {
        fn ask(&mut self, question: &Question) -> Result<Value, UiError> {
            match question.message() {
                "stop" => Err(UiError::Interrupted),
                m => Ok(Value::String(m.to_owned())),
            }
        }
    }

    fn confirm(message: &str) -> Question {
        Question::Confirm {
            message: message.into(),
            default: false,
        }
    }

    #[test]
    fn the_first_question_starts_the_thread_and_answers_come_in_order() {
        let (done, answers) = unbounded();
        let mut asker = Asker::Idle(Box::new(Echo), done);
        asker.ask("1".into(), confirm("a"));
        assert!(matches!(asker, Asker::Asking(_)));
        asker.ask("2".into(), confirm("stop"));
        let got: Vec<Event> = answers.iter().take(2).collect();
        assert_eq!(
            got,
            vec![
                Event::Done {
                    id: "1".into(),
                    result: Ok(Value::String("a".into()))
                },
                Event::Interrupt
            ]
        );
    }

    #[test]
    fn a_failed_asker_fails_every_question() {
        let (done, answers) = unbounded();
        let mut asker = Asker::Failed(done, "no thread".into());
        asker.ask("7".into(), confirm("a"));
        assert_eq!(
            answers.try_recv().unwrap(),
            Event::Done {
                id: "7".into(),
                result: Err("no thread".into())
            }
        );
    }
}
