"""Whether a session child leads a session of its own, as a command on the client's
terminal does (docs/ngw.md 15.7), as a state machine that does no I/O itself.

A child that leads its session starts its job's *anchor* (`ng`, NGW_ANCHOR), which puts a
member with a parent in the session into the child's process group, so that the
terminal's `^Z` stops the command. Until the anchor has exited the child is ANCHORING;
then ANCHORED if the anchor did its part, else ALONE: on a terminal, the child then stays
as the session leader and forks the command's process (which FOLLOWS it). A spare may
lead its session before its session comes (`Child.prepare`), and its successors lead
their own.

`Leading` holds the state, the anchor's pid and the terminal; `child.Child` calls its
transitions and does what they say (setsid, the anchor's spawn and wait, the leader's
fork).
"""

import enum


class Lead(enum.Enum):
    """Whether the child leads a session of its own."""

    #: In the worker's session.
    NONE = "none"
    #: Leads its session; its job's anchor is starting.
    ANCHORING = "anchoring"
    #: Leads its session, and its process group has the anchor's member: the command runs
    #: in this process, and the terminal's `^Z` stops it.
    ANCHORED = "anchored"
    #: Leads its session without an anchor (none is configured, or it failed): on a
    #: terminal, this process stays as the session leader and forks the command.
    ALONE = "alone"
    #: The command's process, forked by the session leader that stands for it.
    FOLLOWS = "follows"


class Leading:
    """One child's `Lead`, with the anchor's pid while it starts, the controlling
    terminal once taken, and the leader a FOLLOWS process stands for."""

    __slots__ = ("state", "anchor", "terminal", "leader")

    def __init__(self):
        self.state = Lead.NONE
        self.anchor = None  # ANCHORING: the anchor's pid
        self.terminal = -1  # the controlling terminal's descriptor, once taken
        self.leader = None  # FOLLOWS: the session leader's pid

    # -- what the child asks -------------------------------------------------------------

    def leads(self):
        """Whether this process leads a session already."""
        return self.state is not Lead.NONE

    def to_settle(self):
        """The anchor's pid, while it is starting: the child waits for it (`settled`)."""
        return self.anchor if self.state is Lead.ANCHORING else None

    def leads_command(self):
        """The command runs in this process as the leader of its session with a
        controlling terminal: the terminal's hangup at the end must not kill what
        follows its exit report."""
        return self.state is Lead.ANCHORED and self.terminal >= 0

    def report_pid(self):
        """The pid the exit report names: the leader's in a FOLLOWS process (the worker
        waits for the leader), else None (this process's)."""
        return self.leader if self.state is Lead.FOLLOWS else None

    # -- transitions ------------------------------------------------------------------------

    def started(self, anchor):
        """This process leads a new session; `anchor`: its anchor's pid, or None (none is
        configured, or it could not start)."""
        self.anchor = anchor
        self.state = Lead.ALONE if anchor is None else Lead.ANCHORING

    def settled(self, anchored):
        """The anchor exited; `anchored`: it put its member in this group (exit 0)."""
        self.anchor = None
        self.state = Lead.ANCHORED if anchored else Lead.ALONE

    def took_terminal(self, fd):
        """The terminal on `fd` became this session's: whether the leader forks the
        command now (no anchor to wait for)."""
        self.terminal = fd
        return self.state is Lead.ALONE

    def at_run(self):
        """Right before the command, the anchor settled: whether the leader forks the
        command now (a session on a terminal whose anchor failed)."""
        return self.terminal >= 0 and self.state is Lead.ALONE

    def follows(self, leader):
        """This is the command's process, forked by the session leader `leader`."""
        self.state, self.leader = Lead.FOLLOWS, leader

    def copied(self):
        """In a spare's successor: the spare's session and anchor are the spare's.
        Whether the copy leads a session of its own (as the spare did)."""
        led = self.state is not Lead.NONE
        self.state, self.anchor = Lead.NONE, None
        return led
