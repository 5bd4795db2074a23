# frozen_string_literal: true

module Ngw
  # One session in the worker: forks the child, then relays until the child's status is
  # known and its output has ended, and sends `X`. On the client's descriptors there is
  # nothing to relay (no `S`, no output chunks); otherwise the child's stdin, stdout and
  # stderr are pipes: stdout and stderr are read in pieces of at most 64 KiB and sent as
  # `1` and `2` (reading stops while 1 MiB waits for ngd), stdin is asked for ahead of the
  # child's reads (one window of 256 KiB with `stdin-window`, else one chunk at a time)
  # and written into its pipe, `.` closes it. `i` chunks become signals: `hangup` is
  # SIGHUP, then SIGKILL two seconds later, to the child's process group.
  class Session
    STOP_SIGNALS = %w[TSTP TTIN TTOU STOP].freeze
    # How long output may stay silent once the child is gone (a process it left running
    # can hold its pipes open).
    DRAIN = 0.1

    def self.run(worker, req, command, ios, cold, pty)
      new(worker, req, command, ios, cold, pty).run
    end

    def initialize(worker, req, command, ios, cold, pty)
      @pty, @pty_fds = pty
      @worker = worker
      @chan = worker.chan
      @req = req
      @command = command
      @ios = ios
      @cold = cold
    end

    def run
      @report_r, @report_w = IO.pipe if @worker.learn? && !@cold
      unless @ios
        @in_r, @in_w = IO.pipe
        @out_r, out_w = IO.pipe
        @err_r, err_w = IO.pipe
        @child_ios = { 0 => @in_r, 1 => out_w, 2 => err_w }
      end
      @worker_pid = Process.pid
      @pid = hand_to_spare || fork { child_main }
      begin
        # A child on a controlling terminal leads a session (setsid, which a group leader
        # cannot call); any other is a process group in the worker's session.
        Process.setpgid(@pid, @pid) unless @pty
      rescue SystemCallError
        nil
      end
      (@ios || @child_ios).each_value(&:close)
      @pty&.close
      @report_w&.close
      @worker.notice('fallback', "#{@cold}; ran cold", @req.id) if @cold
      relay
    end

    # What a spare needs of the session, and the descriptors that go with it.
    def spare_state
      ios = []
      index = ->(io) { io && (ios << io).size - 1 }
      fds = (@ios || @child_ios).transform_values { |io| index.call(io) }
      state = { req: @req.to_h.merge(fds: []), command: @command.to_h, cold: @cold,
                worker_pid: @worker_pid, relayed: @ios.nil?, fds: fds, pty: index.call(@pty),
                pty_fds: @pty_fds, report: index.call(@report_w) }
      [state, ios]
    end

    # The worker's spare takes the session; its pid, or nil (fork one).
    def hand_to_spare
      spare = @worker.take_spare
      return nil unless spare

      state, ios = spare_state
      spare.hand_over(state, ios) ? spare.pid : nil
    end

    # In a spare: the Session its state describes, ready for child_main.
    def self.from_spare(worker, state, ios)
      req = Worker::Request.new(**state[:req])
      command = Zygote::Command.new(*state[:command].values_at(:name, :program))
      fds = state[:fds].transform_values { |i| ios[i] }
      pty = state[:pty] && [ios[state[:pty]], state[:pty_fds]]
      session = new(worker, req, command, state[:relayed] ? nil : fds, state[:cold], pty)
      session.adopt(state, fds, ios)
      session
    end

    # The rest of a spare's state: the worker's pid, the child's pipes, the report pipe.
    def adopt(state, fds, ios)
      @worker_pid = state[:worker_pid]
      @child_ios = fds if state[:relayed]
      @report_w = state[:report] && ios[state[:report]]
    end

    # --- in the child --------------------------------------------------------------------

    def child_main
      base = $LOADED_FEATURES.size
      Profile.start
      begin
        Child.reset_signals
        Sys.parent_death_signal('KILL')
        exit!(1) if Process.ppid != @worker_pid
        [@chan.io, @worker.chld_r, @worker.chld_w, @report_r, @in_w, @out_r, @err_r].each do |io|
          io.close if io && !io.closed?
        end
        if @pty
          anchor = Child.controlling_terminal(@pty, @worker.anchor)
          @pty_fds.each do |fd|
            @ios[fd].close unless @ios[fd].equal?(@pty)
            @ios[fd] = @pty
          end
        else
          Process.setpgid(0, 0)
        end
        Child.standard_streams(@ios || @child_ios)

        Child.environment(@req, @worker.zygote.delta)
        Child.settle_anchor(anchor) if anchor && @cold
        args = @req.args.dup
        if @command.interpreter?
          argv0 = @command.name
          script = args.first
          Child.exec_cold(argv0, nil, args) if @cold || !script || !File.file?(script)
          args.shift
        else
          argv0 = script = @command.program
          Child.exec_cold(argv0, script, args) if @cold
        end
        $0 = script
        ARGV.replace(args)
        Child.settle_anchor(anchor) if anchor
      rescue SystemCallError, ArgumentError, IOError => e
        (STDERR.closed? ? $stderr : STDERR).write("ngw: cannot start #{@command.name}: #{e.message}\n")
        exit!(126)
      end
      report(base) if @report_w
      Profile.main
      begin
        Child.run_main(script)
      rescue SyntaxError
        Child.exec_cold(argv0, @command.program, @req.args)
      end
    end

    # Records the outermost requires the session makes (a require made while no other is
    # running: the program's own, not those a library makes while it loads), and at exit,
    # after the program's own hooks, sends the files they loaded to the worker, which
    # learns them as preloads. Requiring those files in that order rebuilds what the
    # program had loaded, each library whole. A require that asked whether a standard
    # stream is a terminal and got another answer than the zygote's streams give is left
    # out with every later one, and the report says so (Zygote::TTY_MARK): preloaded, it would decide by the
    # zygote's streams (reline, loaded by irb, picks its terminal driver so), and the
    # zygote then leaves out every learned preload that asks.
    def report(_base)
      me = Process.pid
      w = @report_w
      zygote_ttys = @worker.zygote.own_ttys
      Zygote.tty_listener = lambda do |fd, answer|
        RequireHook.differs = true if RequireHook.depth.positive? && zygote_ttys[fd] != answer
      end
      IO.prepend(Zygote::Recorder::TtyHook) unless IO < Zygote::Recorder::TtyHook
      RequireHook.on = true
      at_exit do
        if Process.pid == me
          begin
            mark = RequireHook.left_out ? [Zygote::TTY_MARK] : []
            w.write((RequireHook.roots + mark).join("\n"))
            w.close
          rescue StandardError
            nil
          end
        end
      end
    end

    # Kernel#require, noting which file each outermost require loaded, once `on` (in a
    # session's child). Prepended to Kernel once, in the zygote, before its rehearsal
    # (`install`): a prepend to Kernel in each child would throw away the interpreter's
    # method caches.
    module RequireHook
      @on = false
      @depth = 0
      @roots = []

      @differs = false
      @left_out = false

      class << self
        attr_accessor :on, :depth, :differs, :left_out
        attr_reader :roots

        def install
          Kernel.prepend(self) unless Kernel < self
        end
      end

      private

      def require(path)
        return super unless RequireHook.on && RequireHook.depth.zero?

        before = $LOADED_FEATURES.size
        RequireHook.depth = 1
        RequireHook.differs = false
        begin
          super
        ensure
          RequireHook.depth = 0
          top = $LOADED_FEATURES[before..]&.last
          # What comes after a require left out may depend on it: left out too.
          RequireHook.left_out ||= RequireHook.differs
          RequireHook.roots << top if top && !RequireHook.left_out
        end
      end
    end

    # --- in the worker -------------------------------------------------------------------

    def relay
      @outputs = @ios ? {} : { @out_r => '1', @err_r => '2' }
      @report = +''
      @status = nil
      @stdin_buf = +''
      @granted = 0
      @asked = false
      @stdin_done = @ios ? true : false
      @hangup_at = nil
      @forwarded_stop = false
      @drain_until = nil
      grant
      step until finished?
      finish
    end

    def finished?
      return false unless @status

      @drain_until ||= now + DRAIN
      @outputs.empty? || now > @drain_until
    end

    def now
      Process.clock_gettime(Process::CLOCK_MONOTONIC)
    end

    def step
      readers = [@chan.io, @worker.chld_r]
      readers.concat(@outputs.keys) if @chan.pending_output < Worker::OUT_HIGH
      readers << @report_r if @report_r
      writers = []
      writers << @chan.io if @chan.pending_output.positive?
      writers << @in_w if @in_w && !@stdin_buf.empty?
      timeout = nil
      timeout = [@hangup_at - now, 0].max if @hangup_at && !@status
      timeout = [@drain_until - now, 0].max if @drain_until
      timeout = 0 if @chan.backlog?
      r, w = IO.select(readers, writers, nil, timeout)
      r ||= []
      w ||= []
      @chan.flush_some if w.include?(@chan.io)
      write_stdin if w.include?(@in_w)
      read_channel if r.include?(@chan.io) || @chan.backlog?
      @outputs.each_key.to_a.each { |io| read_output(io) if r.include?(io) }
      read_report if @report_r && r.include?(@report_r)
      wait_child if r.include?(@worker.chld_r) || !@status
      kill_late
    end

    def read_report
      data = @report_r.read_nonblock(1 << 16, exception: false)
      case data
      when nil
        @report_r.close
        @report_r = nil
      when String then @report << data
      end
    end

    def read_output(io)
      data = io.read_nonblock(Wire::OUT_CHUNK, exception: false)
      return if data == :wait_readable

      if data.nil?
        @outputs.delete(io)
        io.close
      else
        @chan.send_chunk(@outputs[io], data)
      end
    rescue Errno::EIO
      @outputs.delete(io)
      io.close
    end

    def wait_child
      @worker.chld_r.read_nonblock(4096, exception: false)
      loop do
        pid, st = Process.waitpid2(@pid, Process::WNOHANG | Process::WUNTRACED)
        return unless pid

        if st.stopped?
          @chan.send_chunk('z', "SIG#{Signal.signame(st.stopsig)}") unless @forwarded_stop ||
                                                                           !@worker.feature?('signals')
          next
        end
        @status = st
        return
      end
    rescue Errno::ECHILD
      # Reaped elsewhere: the status is lost.
      @status ||= :lost
    end

    def read_channel
      @chan.read_chunks.each do |c|
        c.fds.each(&:close)
        case c.type
        when '0'
          @granted -= c.payload.bytesize
          @asked = false
          if @in_w
            @stdin_buf << c.payload
            write_stdin
          end
        when '.'
          @asked = false
          @stdin_done = true
          close_stdin if @stdin_buf.empty?
        when 'i' then interrupt(c.payload)
        when 'p' then @chan.send_chunk('o', c.payload)
        when 'q' then @worker.quit!
        end
      end
      hangup('channel closed') if @chan.eof?
      grant
    end

    # Asks ngd for stdin ahead of the child's reads (docs/ngw.md 11.4).
    def grant
      return if @stdin_done || @in_w.nil?

      if @worker.feature?('stdin-window')
        have = @granted + @stdin_buf.bytesize
        return if have >= Worker::WINDOW / 2

        more = Worker::WINDOW - have
        @granted += more
        @chan.send_chunk('S', more.to_s)
      elsif !@asked && @stdin_buf.empty?
        @asked = true
        @chan.send_chunk('S')
      end
    end

    def write_stdin
      return unless @in_w

      n = @in_w.write_nonblock(@stdin_buf, exception: false)
      @stdin_buf = @stdin_buf.byteslice(n, @stdin_buf.bytesize - n) if n.is_a?(Integer)
      close_stdin if @stdin_done && @stdin_buf.empty?
      grant
    rescue Errno::EPIPE
      @stdin_buf = +''
      @stdin_done = true
      close_stdin
    end

    def close_stdin
      @in_w&.close
      @in_w = nil
    end

    def interrupt(payload)
      what, target = payload.split(' ', 2)
      if what == 'hangup'
        hangup('hangup')
      elsif what == 'winsize'
        signal('WINCH', false) if @ios
      elsif what.start_with?('SIG') && Signal.list.key?(name = what.delete_prefix('SIG'))
        @forwarded_stop = true if STOP_SIGNALS.include?(name)
        @forwarded_stop = false if name == 'CONT'
        signal(name, target == 'process')
      else
        @worker.log("ignored interrupt #{payload.inspect}")
      end
    end

    def signal(name, process_only)
      Process.kill(name, process_only ? @pid : -@pid)
    rescue Errno::ESRCH, Errno::EPERM
      nil
    end

    def hangup(_why)
      @stdin_done = true
      @stdin_buf = +''
      close_stdin
      return if @hangup_at || @status

      signal('HUP', false)
      signal('CONT', false)
      @hangup_at = now + Worker::KILL_GRACE
      @worker.quit! if @chan.eof?
    end

    def kill_late
      return unless @hangup_at && !@status && now >= @hangup_at

      signal('KILL', false)
      @hangup_at = now + 3600
    end

    def finish
      @outputs.each_key(&:close)
      close_stdin
      if @report_r
        loop do
          data = @report_r.read_nonblock(1 << 16, exception: false)
          break unless data.is_a?(String)

          @report << data
        end
        @report_r.close
      end
      learn
      @chan.send_chunk('X', exit_payload)
    end

    def exit_payload
      st = @status
      return "1\n" if st == :lost
      return "#{st.exitstatus}\n" if st.exited?

      n = st.termsig
      return "#{128 + n}\n" unless @worker.feature?('signals')

      "#{128 + n} SIG#{Signal.signame(n)}#{st.coredump? ? ' core' : ''}\n"
    end

    def learn
      return if @report.empty?

      added = @worker.zygote.learn(@report.split("\n"))
      return unless added.positive? && !@worker.retiring

      @worker.notice('retire', "learned #{added} file(s) to preload; a fresh worker preloads them",
                     @req.id)
      @worker.retiring = true
    end
  end
end
