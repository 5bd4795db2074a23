"""Fork mode's state machines, step by step, without a process: whether a child leads its
session (`lead.Leading`), a spare's messages from the worker (`common.Inbox`), where a
session's child runs (`common.placement`), the pace of sessions (`parent.Pace`), and
what a session asks of the spares when it starts and after its X (`parent.take_spare`,
`parent.after_session`, over `spares.Spares` with a scripted `SpareIO`)."""

import marshal
import socket
import unittest

from ngw._fork import parent
from ngw._fork.common import FD, LEN, Inbox, Place, placement
from ngw._fork.lead import Lead, Leading
from ngw._fork.parent import Pace, after_session, take_spare
from ngw._fork.spares import NOT_YET, SpareIO, Spares, State


class LeadSteps(unittest.TestCase):
    def test_in_the_worker_s_session_nothing_to_settle_or_fork(self):
        lead = Leading()
        self.assertFalse(lead.leads())
        self.assertIsNone(lead.to_settle())
        self.assertFalse(lead.at_run())
        self.assertFalse(lead.leads_command())
        self.assertIsNone(lead.report_pid())

    def test_anchored_the_command_runs_here_and_leads_its_session(self):
        lead = Leading()
        lead.started(4242)
        self.assertEqual((lead.state, lead.to_settle()), (Lead.ANCHORING, 4242))
        self.assertFalse(lead.took_terminal(7))  # the anchor first
        lead.settled(True)
        self.assertEqual((lead.state, lead.to_settle()), (Lead.ANCHORED, None))
        self.assertFalse(lead.at_run())
        self.assertTrue(lead.leads_command())
        self.assertIsNone(lead.report_pid())

    def test_an_anchor_that_failed_forks_the_leader_at_run(self):
        lead = Leading()
        lead.started(4242)
        lead.took_terminal(7)
        lead.settled(False)
        self.assertEqual(lead.state, Lead.ALONE)
        self.assertTrue(lead.at_run())
        lead.follows(100)
        self.assertEqual((lead.state, lead.report_pid()), (Lead.FOLLOWS, 100))
        self.assertFalse(lead.at_run())
        self.assertFalse(lead.leads_command())

    def test_without_an_anchor_the_leader_forks_as_the_terminal_is_taken(self):
        lead = Leading()
        lead.started(None)
        self.assertEqual(lead.state, Lead.ALONE)
        self.assertTrue(lead.took_terminal(5))
        self.assertEqual(lead.terminal, 5)

    def test_a_spare_led_ahead_without_a_terminal_forks_no_leader(self):
        lead = Leading()
        lead.started(None)  # a led spare whose anchor could not start
        self.assertFalse(lead.at_run())  # no terminal: not a session on one
        self.assertFalse(lead.leads_command())

    def test_a_successor_leads_a_session_of_its_own_only_if_its_spare_did(self):
        lead = Leading()
        self.assertFalse(lead.copied())
        lead.started(4242)
        lead.settled(True)
        self.assertTrue(lead.copied())
        self.assertEqual((lead.state, lead.anchor), (Lead.NONE, None))


def record(obj):
    payload = marshal.dumps(obj)
    return LEN.pack(len(payload)) + payload


def rights(*fds):
    data = b"".join(FD.pack(fd) for fd in fds)
    return [(socket.SOL_SOCKET, socket.SCM_RIGHTS, data)]


class InboxSteps(unittest.TestCase):
    def test_a_record_in_pieces(self):
        inbox = Inbox()
        data = record({"command": "x"})
        self.assertFalse(inbox.whole())
        inbox.feed(data[:3])
        self.assertFalse(inbox.whole())
        inbox.feed(data[3:-1])
        self.assertFalse(inbox.whole())
        inbox.feed(data[-1:])
        self.assertTrue(inbox.whole())
        self.assertEqual(inbox.take(), {"command": "x"})
        self.assertEqual(inbox.buf, bytearray())

    def test_a_request_then_a_session_read_together(self):
        inbox = Inbox()
        inbox.feed(record({"clone": True}) + record({"command": "x", "fds": [1]}), rights(9))
        self.assertEqual(inbox.take(), {"clone": True})
        self.assertTrue(inbox.whole())  # read ahead: a spare does not clone then
        self.assertEqual(inbox.take(), {"command": "x", "fds": [1]})
        self.assertEqual(inbox.take_fds(), [9])
        self.assertEqual(inbox.take_fds(), [])

    def test_descriptors_of_several_messages_gather(self):
        inbox = Inbox()
        inbox.feed(b"", rights(3, 4))
        inbox.feed(b"", [(socket.SOL_SOCKET, 99, b"ignored!")] + rights(5))
        self.assertEqual(inbox.take_fds(), [3, 4, 5])


class Info:
    def __init__(self, tty=(False, False, False), fds=None, pty=None):
        self.tty, self.fds, self.pty = tty, fds, pty


class Placement(unittest.TestCase):
    def test_the_client_s_terminal(self):
        info = Info(tty=(True, True, True), fds=(0, 1, 2), pty=(0, 1, 2))
        self.assertIs(placement(info, True), Place.TERMINAL)
        self.assertIs(placement(info, False), Place.TERMINAL)

    def test_a_pty_of_the_worker_s_on_stdin(self):
        self.assertIs(placement(Info(tty=(True, False, False)), True), Place.EMULATED)
        self.assertIs(placement(Info(tty=(True, False, False)), False), Place.EMULATED)

    def test_the_client_s_own_terminal_without_ctty_is_a_group(self):
        info = Info(tty=(True, True, True), fds=(0, 1, 2))
        self.assertIs(placement(info, True), Place.GROUP)
        self.assertIs(placement(info, False), Place.SESSION)

    def test_pipes(self):
        self.assertIs(placement(Info(), True), Place.GROUP)
        self.assertIs(placement(Info(tty=(False, True, True)), False), Place.SESSION)


class PaceSteps(unittest.TestCase):
    def test_back_to_back_and_short(self):
        pace = Pace()
        self.assertFalse(pace.starts(10.0))  # the first session
        self.assertFalse(pace.ask_during(False, "x"))
        pace.ended("x", 10.0, 10.001)
        back = pace.starts(10.001 + parent._BACK_TO_BACK / 2)
        self.assertTrue(back)
        self.assertTrue(pace.ask_during(back, "x"))
        self.assertFalse(pace.ask_during(back, "y"))  # no session of y yet: long
        self.assertFalse(pace.starts(10.001 + 2 * parent._BACK_TO_BACK))

    def test_a_long_session_is_not_asked_during(self):
        pace = Pace()
        pace.ended("x", 10.0, 10.0 + 2 * parent._SHORT_SESSION)
        self.assertFalse(pace.ask_during(True, "x"))


class Child:
    def __init__(self, name, led=False):
        self.name, self.led = name, led

    def __repr__(self):
        return self.name


class Script(SpareIO):
    """Children are `Child` objects named s1, s2, ...; `answers[name]`: what reading its
    answer gives (a successor's name, None or NOT_YET). `calls` records every call."""

    def __init__(self):
        self.calls = []
        self.forks = 0
        self.answers = {}
        self.led = False  # the children forked lead their sessions
        self.made = {}

    def _child(self, name):
        if name not in self.made:
            self.made[name] = Child(name, self.led)
        return self.made[name]

    def fork(self, rehearse):
        self.calls.append(("fork", rehearse))
        self.forks += 1
        return self._child("s%d" % self.forks)

    def ask(self, child):
        self.calls.append(("ask", child.name))
        return True

    def answer(self, child, timeout):
        self.calls.append(("answer", child.name))
        got = self.answers.pop(child.name, None)
        return got if got in (None, NOT_YET) else self._child(got)

    def exited(self, child):
        return False

    def release(self, child):
        self.calls.append(("release", child.name))

    def kill(self, child):
        self.calls.append(("kill", child.name))


class SessionSteps(unittest.TestCase):
    def setUp(self):
        self.io = Script()
        self.spares = Spares(self.io)

    def calls(self):
        calls, self.io.calls = self.io.calls, []
        return calls

    def test_a_spare_that_leads_its_session_serves_only_one_on_a_terminal(self):
        self.io.led = True
        self.spares.fork_spare()
        self.calls()
        self.assertIsNone(take_spare(self.spares, on_terminal=False))
        self.assertEqual(self.calls(), [("kill", "s1")])
        self.spares.fork_spare()
        self.assertEqual(take_spare(self.spares, on_terminal=True).name, "s2")

    def test_a_spare_in_the_worker_s_session_serves_any(self):
        self.spares.fork_spare()
        self.assertEqual(take_spare(self.spares, on_terminal=False).name, "s1")
        self.assertEqual(take_spare(self.spares, on_terminal=False), None)

    def test_after_a_session_the_spare_is_due(self):
        after_session(self.spares, resume=True, back_to_back=False)
        self.assertEqual((self.spares.state, self.calls()), (State.DUE, []))
        self.spares.fork_if_due()  # the child was reaped
        self.assertEqual(self.calls(), [("fork", True)])

    def test_back_to_back_the_spare_is_forked_now_and_asked(self):
        after_session(self.spares, resume=True, back_to_back=True)
        self.assertEqual(self.calls(), [("fork", False), ("ask", "s1")])
        self.assertEqual(self.spares.state, State.ASKED)

    def test_back_to_back_a_spare_adopted_is_asked(self):
        self.spares.fork_spare()
        self.spares.ask()
        self.io.answers["s1"] = "s2"
        take_spare(self.spares, on_terminal=False)  # s1's answer is there: s2 is the spare
        self.calls()
        after_session(self.spares, resume=True, back_to_back=True)
        self.assertEqual(self.calls(), [("ask", "s2")])

    def test_no_spare_when_the_worker_quits(self):
        self.spares.make_due()
        after_session(self.spares, resume=False, back_to_back=True)
        self.assertEqual((self.spares.state, self.calls()), (State.NONE, []))


if __name__ == "__main__":
    unittest.main()
