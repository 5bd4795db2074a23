# frozen_string_literal: true

require 'socket'

module Ngw
  # The spare: the next session's child, forked ahead of time (after the hello and after
  # each session, once its `X` is sent). It does what does not depend on the session
  # (signal dispositions, the parent-death signal, closing the worker's descriptors), then
  # waits on a socket of its own for the session: the Session's state (Marshal) and its
  # descriptors (SCM_RIGHTS, in one message). It then goes on exactly as a child forked
  # at session time does (Session#child_main), so a session costs no fork. End of file on
  # its socket (the worker discarded it, or exited) makes it exit.
  class Spare
    attr_reader :pid

    # Forks a spare of the zygote `worker`.
    # With `ahead` ([directory, environment], the last session's), it builds rubocop's
    # default configuration for them first (Ahead).
    def self.fork_for(worker, ahead = nil)
      ours, theirs = UNIXSocket.pair
      worker_pid = Process.pid
      pid = fork do
        Child.reset_signals
        Sys.parent_death_signal('KILL')
        exit!(0) if Process.ppid != worker_pid
        [worker.chan.io, worker.chld_r, worker.chld_w, ours].each { |io| io.close unless io.closed? }
        Ahead.prepare(*ahead) if ahead
        Spare.wait_for_session(worker, theirs)
      end
      theirs.close
      new(pid, ours)
    end

    def initialize(pid, sock)
      @pid = pid
      @sock = sock
    end

    # In the spare: reads the session and runs it; exits if none comes.
    def self.wait_for_session(worker, sock)
      data = +''
      ios = []
      loop do
        chunk, _addr, _flags, *controls = sock.recvmsg(1 << 16, 0, 64, scm_rights: true)
        controls.each { |c| ios.concat(c.unix_rights) if c.cmsg_is?(:SOCKET, :RIGHTS) }
        break if chunk.nil? || chunk.empty?

        data << chunk
      end
      sock.close
      exit!(0) if data.empty?

      Session.from_spare(worker, Marshal.load(data), ios).child_main # rubocop:disable Security/MarshalLoad
    end

    # Hands the session to the spare: `state` (marshalled) with `ios` (IO objects, sent as
    # descriptors). False if the spare is gone.
    def hand_over(state, ios)
      data = Marshal.dump(state)
      sent = @sock.sendmsg(data, 0, nil, Socket::AncillaryData.unix_rights(*ios))
      @sock.write(data.byteslice(sent..)) if sent < data.bytesize
      @sock.close
      true
    rescue SystemCallError, IOError
      discard
      false
    end

    # Lets the spare go: it exits when its socket closes.
    def discard
      @sock.close unless @sock.closed?
    end
  end
end
