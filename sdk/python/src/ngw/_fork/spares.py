"""The life cycle of the children forked ahead of time (docs/ngw.md 11.5), as a state
machine that does no I/O itself.

The *spare* is a child waiting for the next session. Asked for its successor, it clones
one (the *standby*); the worker reads its answer, and the standby becomes the spare, when
the spare is handed its session, dies, or is discarded. A spare handed its session before
its answer came is *pending*: its answer is read after the session's X. A spare that is
*due* is forked once the last session's child has been reaped.

`Spares` holds the spare and a pending spare, in a `State`; the fork runner calls its
transitions, and the machine calls back the runner's `SpareIO` for everything that
touches a process or a socket (fork, ask, read an answer, wait, close, kill). The children
are opaque to it.
"""

import abc
import enum

#: Seconds a spare may take to answer a request for its successor, when its answer is
#: waited for.
ANSWER_TIMEOUT = 2.0
#: `SpareIO.answer`'s result when the spare has not answered yet (it is still cloning).
NOT_YET = object()


class State(enum.Enum):
    """Where the next session's child stands."""

    #: No spare, and none to fork: the next session forks its own child.
    NONE = "none"
    #: No spare yet: one is forked once the last session's child is reaped.
    DUE = "due"
    #: A spare waits for its session.
    READY = "ready"
    #: A spare waits for its session, asked to clone its successor (the standby); its
    #: answer is owed.
    ASKED = "asked"
    #: During a session: the spare handed it owes its answer; no spare.
    PENDING = "pending"


class SpareIO(abc.ABC):
    """What the machine asks of the fork runner: every call that touches a process or a
    socket."""

    @abc.abstractmethod
    def fork(self, rehearse):
        """Forks a spare (`rehearse`: it rehearses the session's set-up while it waits);
        the child, or None if the fork failed."""

    @abc.abstractmethod
    def ask(self, child):
        """Asks `child` to clone its successor; whether the request was sent."""

    @abc.abstractmethod
    def answer(self, child, timeout):
        """Reads `child`'s answer to `ask`: its successor (a child), None (it made none,
        or it is gone), or NOT_YET (only with timeout 0: no answer so far)."""

    @abc.abstractmethod
    def exited(self, child):
        """Whether `child` has exited (it is reaped then)."""

    @abc.abstractmethod
    def release(self, child):
        """Closes the worker's ends of `child`'s socket and pipes."""

    @abc.abstractmethod
    def kill(self, child):
        """Closes the worker's ends of `child`'s socket and pipes, and kills it."""


class Spares:
    """The spare and a pending spare, in a `State`. One per fork runner; single-threaded."""

    def __init__(self, io, can_clone=True):
        self.io = io
        self.can_clone = can_clone  # the spares can clone their successors (a Cloner)
        self.state = State.NONE
        self.spare = None  # READY, ASKED
        self.pending = None  # PENDING

    def children(self):
        """The children held: the spare, or the pending spare."""
        return [c for c in (self.spare, self.pending) if c is not None]

    # -- transitions ------------------------------------------------------------------------

    def make_due(self):
        """A spare is wanted: `fork_if_due` forks it once the children are reaped."""
        if self.state is State.NONE:
            self.state = State.DUE

    def not_due(self):
        """No spare is wanted (a session is about to fork its own child)."""
        if self.state is State.DUE:
            self.state = State.NONE

    def fork_spare(self, rehearse=True):
        """Forks the spare now."""
        self.not_due()
        child = self.io.fork(rehearse)
        if child is not None:
            self.spare = child
            self.state = State.READY

    def fork_if_due(self):
        """The children are reaped: the spare, if one is due."""
        if self.state is State.DUE:
            self.fork_spare()

    def ask(self):
        """Asks the spare for its successor, if there is one to ask and it was not asked."""
        if self.state is State.READY and self.can_clone and self.io.ask(self.spare):
            self.state = State.ASKED

    def take(self):
        """A session starts: the spare for it, or None. An asked spare's answer is read if
        it is there (its successor becomes the spare), else the spare is PENDING."""
        child, asked = self.spare, self.state is State.ASKED
        self.spare, self.state = None, State.NONE
        if asked:
            successor = self.io.answer(child, 0.0)
            if successor is NOT_YET:
                self.pending, self.state = child, State.PENDING
            else:
                self._adopt(successor)
        return child

    def session_ended(self):
        """The session's X is sent: the pending spare's answer is waited for, its
        successor becoming the spare."""
        if self.state is not State.PENDING:
            return
        child, self.pending, self.state = self.pending, None, State.NONE
        self._adopt(self.io.answer(child, ANSWER_TIMEOUT))
        self.io.release(child)

    def discard_taken(self, child):
        """The session's child could not be handed its session: it goes, with the successor
        it owes if it is the pending spare."""
        if child is self.pending:
            self.pending, self.state = None, State.NONE
            self._drop_successor(child)
        self.io.kill(child)

    def discard(self):
        """The spare goes, with its successor (the worker changed: a copy made earlier would
        not see what a child forked at session time sees); none is due."""
        child, asked = self.spare, self.state is State.ASKED
        self.spare, self.state = None, State.NONE
        if child is not None:
            if asked:
                self._drop_successor(child)
            self.io.kill(child)

    def reap(self):
        """Notices a spare that exited: the successor it cloned before it went, if it was
        asked and answered, becomes the spare."""
        child = self.spare
        if child is None or not self.io.exited(child):
            return
        asked = self.state is State.ASKED
        self.spare, self.state = None, State.NONE
        if asked:
            successor = self.io.answer(child, 0.0)
            self._adopt(None if successor is NOT_YET else successor)
        self.io.release(child)

    # -- helpers ----------------------------------------------------------------------------

    def _adopt(self, successor):
        """An answer's successor becomes the spare (there is none: one request per spare,
        read once its spare is gone)."""
        if successor is None:
            return
        if self.spare is None:
            self.spare, self.state = successor, State.READY
        else:
            self.io.kill(successor)

    def _drop_successor(self, child):
        """Waits for the answer `child` owes; its successor, if it made one, goes."""
        successor = self.io.answer(child, ANSWER_TIMEOUT)
        if successor is not None:
            self.io.kill(successor)
