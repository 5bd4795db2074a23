"""The spares' state machine (`ngw._fork.spares`), step by step, without a process: a
scripted `SpareIO` stands in for the fork runner, and each test drives the machine
through a sequence (a session with a spare ready, with none, while the spare is still
cloning its successor; a spare that dies; a discard; ...) checking its state and the
forks, requests, reads, closes and kills it asked for."""

import unittest

from ngw._fork.spares import ANSWER_TIMEOUT, NOT_YET, SpareIO, Spares, State


class Script(SpareIO):
    """Children are names ("s1", "s2", ...). `answers[child]`: what reading its answer
    gives (a successor's name, None, or NOT_YET; then None once read); `dead`: children
    that have exited. `calls` records every call in order."""

    def __init__(self):
        self.calls = []
        self.forks = 0
        self.fork_fails = False
        self.ask_fails = False
        self.answers = {}
        self.dead = set()

    def fork(self, rehearse):
        self.calls.append(("fork", rehearse))
        if self.fork_fails:
            return None
        self.forks += 1
        return "s%d" % self.forks

    def ask(self, child):
        self.calls.append(("ask", child))
        return not self.ask_fails

    def answer(self, child, timeout):
        self.calls.append(("answer", child, timeout))
        got = self.answers.get(child)
        if got is not NOT_YET:
            self.answers.pop(child, None)
        return got

    def exited(self, child):
        self.calls.append(("exited", child))
        return child in self.dead

    def release(self, child):
        self.calls.append(("release", child))

    def kill(self, child):
        self.calls.append(("kill", child))


class Steps(unittest.TestCase):
    def setUp(self):
        self.io = Script()
        self.spares = Spares(self.io)

    def calls(self):
        """The calls since the last look, without the `exited` polls of reap()."""
        calls, self.io.calls = self.io.calls, []
        return [c for c in calls if c[0] != "exited"]

    def check(self, state, spare=None, pending=None):
        s = self.spares
        self.assertEqual((s.state, s.spare, s.pending), (state, spare, pending))
        self.assertEqual(s.children(), [c for c in (spare, pending) if c is not None])

    def ready(self):
        """After a session: a spare is due, forked once the children are reaped."""
        self.spares.make_due()
        self.spares.fork_if_due()
        self.check(State.READY, "s1")
        self.calls()

    def asked(self, answer):
        """A ready spare asked for its successor; reading its answer will give `answer`."""
        self.ready()
        self.spares.ask()
        self.check(State.ASKED, "s1")
        self.assertEqual(self.calls(), [("ask", "s1")])
        self.io.answers["s1"] = answer

    # -- forking ----------------------------------------------------------------------------

    def test_a_due_spare_is_forked_once_the_children_are_reaped(self):
        self.check(State.NONE)
        self.spares.fork_if_due()
        self.assertEqual(self.calls(), [])  # none due: nothing forked
        self.spares.make_due()
        self.check(State.DUE)
        self.spares.reap()
        self.check(State.DUE)  # reap() alone forks nothing: the runner says when
        self.spares.fork_if_due()
        self.check(State.READY, "s1")
        self.assertEqual(self.calls(), [("fork", True)])
        self.spares.make_due()  # a spare is there already
        self.check(State.READY, "s1")

    def test_a_failed_fork_leaves_no_spare_and_none_due(self):
        self.io.fork_fails = True
        self.spares.make_due()
        self.spares.fork_if_due()
        self.check(State.NONE)
        self.assertEqual(self.calls(), [("fork", True)])
        self.spares.fork_if_due()
        self.assertEqual(self.calls(), [])

    def test_a_session_cancels_the_due_spare(self):
        self.spares.make_due()
        self.spares.not_due()
        self.spares.fork_if_due()
        self.check(State.NONE)
        self.assertEqual(self.calls(), [])

    def test_a_spare_forked_back_to_back_does_not_rehearse(self):
        self.spares.make_due()
        self.spares.fork_spare(rehearse=False)
        self.check(State.READY, "s1")
        self.assertEqual(self.calls(), [("fork", False)])

    # -- sessions ---------------------------------------------------------------------------

    def test_a_session_with_no_spare_forks_its_own_child(self):
        self.assertIsNone(self.spares.take())
        self.check(State.NONE)
        self.spares.session_ended()
        self.check(State.NONE)
        self.assertEqual(self.calls(), [])

    def test_a_session_takes_the_ready_spare(self):
        self.ready()
        self.assertEqual(self.spares.take(), "s1")
        self.check(State.NONE)
        self.assertEqual(self.calls(), [])  # the runner hands it its session
        self.spares.session_ended()
        self.check(State.NONE)
        self.assertEqual(self.calls(), [])

    def test_a_session_takes_an_answered_spare_and_its_successor_becomes_the_spare(self):
        self.asked("c1")
        self.assertEqual(self.spares.take(), "s1")
        self.check(State.READY, "c1")
        self.assertEqual(self.calls(), [("answer", "s1", 0.0)])
        self.spares.ask()  # back to back: the new spare is asked during the session
        self.check(State.ASKED, "c1")
        self.spares.session_ended()
        self.check(State.ASKED, "c1")
        self.assertEqual(self.calls(), [("ask", "c1")])

    def test_a_session_while_the_spare_is_cloning_leaves_it_pending(self):
        self.asked(NOT_YET)
        self.assertEqual(self.spares.take(), "s1")
        self.check(State.PENDING, pending="s1")
        self.assertEqual(self.calls(), [("answer", "s1", 0.0)])
        self.spares.ask()  # no spare to ask during the session
        self.assertEqual(self.calls(), [])
        # X: the answer is waited for; the successor is the next spare.
        self.io.answers["s1"] = "c1"
        self.spares.session_ended()
        self.check(State.READY, "c1")
        self.assertEqual(self.calls(), [("answer", "s1", ANSWER_TIMEOUT), ("release", "s1")])

    def test_a_pending_spare_that_made_no_successor_leaves_none(self):
        self.asked(NOT_YET)
        self.spares.take()
        self.io.answers["s1"] = None
        self.spares.session_ended()
        self.check(State.NONE)
        self.spares.make_due()
        self.check(State.DUE)

    def test_a_pending_spare_that_cannot_take_its_session_goes_with_its_successor(self):
        self.asked(NOT_YET)
        child = self.spares.take()
        self.calls()
        self.io.answers["s1"] = "c1"
        self.spares.discard_taken(child)
        self.check(State.NONE)
        self.assertEqual(self.calls(), [("answer", "s1", ANSWER_TIMEOUT), ("kill", "c1"),
                                        ("kill", "s1")])
        self.spares.session_ended()
        self.assertEqual(self.calls(), [])

    def test_a_taken_spare_that_cannot_take_its_session_is_killed(self):
        self.ready()
        child = self.spares.take()
        self.spares.discard_taken(child)
        self.check(State.NONE)
        self.assertEqual(self.calls(), [("kill", "s1")])

    def test_a_spare_is_asked_once(self):
        self.asked(None)
        self.spares.ask()
        self.assertEqual(self.calls(), [])

    def test_no_spare_is_asked_without_a_cloner(self):
        self.spares = Spares(self.io, can_clone=False)
        self.ready()
        self.spares.ask()
        self.check(State.READY, "s1")
        self.assertEqual(self.calls(), [])

    def test_a_request_that_could_not_be_sent_leaves_the_spare_ready(self):
        self.ready()
        self.io.ask_fails = True
        self.spares.ask()
        self.check(State.READY, "s1")
        self.io.ask_fails = False
        self.spares.ask()
        self.check(State.ASKED, "s1")

    def test_sessions_back_to_back_each_find_a_cloned_spare(self):
        self.asked("c1")
        for n in range(1, 4):
            child = "c%d" % (n - 1) if n > 1 else "s1"
            self.assertEqual(self.spares.take(), child)
            self.spares.ask()
            self.io.answers["c%d" % n] = "c%d" % (n + 1)
            self.spares.session_ended()
            self.check(State.ASKED, "c%d" % n)
        self.assertEqual(self.io.forks, 1)

    # -- deaths -----------------------------------------------------------------------------

    def test_a_dead_spare_is_released_and_none_is_due(self):
        self.ready()
        self.spares.reap()
        self.check(State.READY, "s1")  # alive: nothing changes
        self.io.dead.add("s1")
        self.spares.reap()
        self.check(State.NONE)
        self.assertEqual(self.calls(), [("release", "s1")])

    def test_a_dead_asked_spare_leaves_the_successor_it_cloned(self):
        self.asked("c1")
        self.io.dead.add("s1")
        self.spares.reap()
        self.check(State.READY, "c1")
        self.assertEqual(self.calls(), [("answer", "s1", 0.0), ("release", "s1")])

    def test_a_dead_asked_spare_that_had_not_answered_leaves_none(self):
        self.asked(NOT_YET)
        self.io.dead.add("s1")
        self.spares.reap()
        self.check(State.NONE)
        self.assertEqual(self.calls(), [("answer", "s1", 0.0), ("release", "s1")])

    def test_a_dead_pending_spare_is_left_to_its_session(self):
        self.asked(NOT_YET)
        self.spares.take()
        self.io.dead.add("s1")
        self.spares.reap()
        self.check(State.PENDING, pending="s1")

    # -- discarding (an in-process session, a learned preload, the end) --------------------

    def test_discard_kills_the_spare(self):
        self.ready()
        self.spares.discard()
        self.check(State.NONE)
        self.assertEqual(self.calls(), [("kill", "s1")])

    def test_discard_of_an_asked_spare_waits_for_its_successor_and_kills_it(self):
        self.asked("c1")
        self.spares.discard()
        self.check(State.NONE)
        self.assertEqual(self.calls(), [("answer", "s1", ANSWER_TIMEOUT), ("kill", "c1"),
                                        ("kill", "s1")])

    def test_discard_of_an_asked_spare_that_made_no_successor(self):
        self.asked(None)
        self.spares.discard()
        self.check(State.NONE)
        self.assertEqual(self.calls(), [("answer", "s1", ANSWER_TIMEOUT), ("kill", "s1")])

    def test_discard_cancels_a_due_spare_and_renewing_makes_one_due_again(self):
        self.spares.make_due()
        self.spares.discard()
        self.check(State.NONE)
        self.assertEqual(self.calls(), [])
        self.ready()
        self.spares.discard()
        self.spares.make_due()
        self.check(State.DUE)
        self.spares.fork_if_due()
        self.check(State.READY, "s2")
        self.assertEqual(self.calls(), [("kill", "s1"), ("fork", True)])

    def test_a_second_successor_is_killed(self):
        self.ready()
        self.spares._adopt("c1")
        self.check(State.READY, "s1")
        self.assertEqual(self.calls(), [("kill", "c1")])


if __name__ == "__main__":
    unittest.main()
