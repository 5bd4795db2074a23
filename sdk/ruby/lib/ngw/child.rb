# frozen_string_literal: true

module Ngw
  # A session's child, forked from the zygote: it makes itself what a cold `ruby` started
  # by the client would be (process group, standard streams on the client's descriptors or
  # the worker's pipes, ignored signals, umask, directory, environment, `$0` and `ARGV`),
  # then runs the program as Ruby runs its main script. It runs inside `fork { }`, so
  # Ruby ends it as it ends a main program: `at_exit` hooks, an uncaught exception's
  # message and backtrace, `exit!`, death by an uncaught signal.
  module Child
    module_function

    # The signal dispositions a fresh ruby has that the zygote changed.
    def reset_signals
      Signal.trap('CHLD', 'SYSTEM_DEFAULT')
    end

    # Puts `ios` ({fd => IO}) on the standard streams as Ruby's start-up would have built
    # them there. A terminal is reopened on (`IO#reopen`), so that STDIN, STDOUT or STDERR
    # takes the terminal's mode (Ruby writes through to a terminal and buffers anything
    # else). Anything else is put under the stream's fd with dup2, keeping the IO object
    # Ruby made at the worker's start (not a terminal: the log), which alone has the
    # start-up flag that makes a write to a closed pipe on STDOUT or STDERR a death by
    # SIGPIPE, as cold, rather than Errno::EPIPE. An fd missing from `ios` is closed, as
    # for a cold run started with it closed.
    def standard_streams(ios)
      [STDIN, STDOUT, STDERR].each_with_index do |std, fd|
        io = ios[fd]
        if io
          next if io.equal?(std)

          std.flush unless fd.zero?
          std.reopen(io) unless !io.tty? && Sys.dup2(io.fileno, fd)
        else
          std.close
        end
      end
      ios.each_value { |io| io.close unless io.closed? || io.fileno <= 2 }
      STDOUT.sync = false unless STDOUT.closed?
      STDERR.sync = true unless STDERR.closed?
      $stdin = STDIN
      $stdout = STDOUT
      $stderr = STDERR
    end

    TIOCSCTTY = 0x540E
    # argv[0] that makes `ng` a job's anchor (client/src/anchor.rs).
    ANCHOR_ARGV0 = 'ng:anchor'

    # Makes `pty` (the client's pseudo-terminal) the controlling terminal of a new session
    # this process leads; its process group is then the terminal's foreground group.
    # Starts the job's anchor (`anchor`, ngd's `ng`, NGW_ANCHOR), which puts a member with
    # a parent in the session into this group, so that the group is not orphaned and the
    # terminal's stop keys work (docs/ngw.md 15.7); returns its pid, or nil without one.
    def controlling_terminal(pty, anchor)
      Process.setsid
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + 2
      begin
        pty.ioctl(TIOCSCTTY, 0)
      rescue Errno::EPERM
        # The leader of an earlier session on this terminal may still be exiting.
        raise if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline

        sleep 0.005
        retry
      end
      return nil unless anchor

      Process.spawn([anchor, ANCHOR_ARGV0], Process.pid.to_s, in: File::NULL, out: File::NULL,
                                                              err: File::NULL)
    rescue SystemCallError => e
      raise if e.is_a?(Errno::EPERM) || !anchor

      nil
    end

    # Waits for the anchor, which has exited once its member joined this group.
    def settle_anchor(pid)
      Process.wait(pid)
    rescue SystemCallError
      nil
    end

    # Sets the umask, directory and environment of the session; `delta` is what Ruby's
    # start-up and the preload changed in the environment, done again.
    def environment(session, delta)
      session.sigign.each { |sig| Signal.trap(sig, 'IGNORE') }
      File.umask(session.umask) if session.umask
      Dir.chdir(session.dir) if session.dir
      ENV.replace(session.env)
      delta.each { |k, v| v.nil? ? ENV.delete(k) : ENV[k] = v }
    end

    # Replaces the process with the program, the cold way.
    def exec_cold(argv0, program, args)
      if program
        if File.executable?(program)
          exec([program, program], *args)
        else
          exec([RbConfig.ruby, argv0], program, *args)
        end
      else
        exec([RbConfig.ruby, argv0], *args)
      end
    end

    # Runs `script` (a path, relative to the directory) as Ruby runs its main program:
    # compiled as a file (so `__FILE__` and `__dir__` are as cold, and its top frame is
    # `<main>`), `DATA` after `__END__`. The worker's own frames, below the program's
    # `<main>`, are hidden from every backtrace (HideFrames), so that what Ruby prints for
    # an uncaught exception, and what a program prints of one (rake does), is as cold.
    def run_main(script)
      iseq = RubyVM::InstructionSequence.compile_file(script)
      data_after_end(script)
      Child.hiding = true
      iseq.eval
    end

    # Prepends the frame filters (HideFrames, HideCallers) to Exception and Kernel, once,
    # in the zygote, before its rehearsal: they filter only in a session's child, once
    # `hiding` is set. A prepend to Kernel or Exception throws away the interpreter's
    # method caches (which the rehearsal filled): done in each child, it cost ~20 ms of a
    # rubocop session.
    def install_filters
      Exception.prepend(HideFrames) unless Exception < HideFrames
      Kernel.prepend(HideCallers) unless Kernel < HideCallers
    end

    @hiding = false

    class << self
      # Whether the worker's frames are hidden (in a session's child, from the program's
      # `<main>` on).
      attr_accessor :hiding
    end

    # The worker's files (bin/ and lib/): frames in them are the worker's.
    SDK_DIRS = %w[bin lib].map { |d| "#{File.expand_path("../../#{d}", __dir__)}/" }.freeze

    def self.ours?(path)
      SDK_DIRS.any? { |d| path.start_with?(d) }
    end

    # Whether a Thread::Backtrace::Location is in the worker's files.
    def self.our_location?(loc)
      ours?(loc.absolute_path.to_s) || ours?(loc.path.to_s)
    end

    # Kernel#caller and #caller_locations without the worker's frames: the frames a cold
    # run has, sliced by the same (start, length) or range.
    # Before `hiding` is set, they filter nothing (the zygote's own frames are not hidden).
    module HideCallers
      def caller(*args)
        frames = super(1)
        frames = frames.reject { |l| Child.ours?(l) } if Child.hiding
        Child.slice_frames(frames, args)
      end

      def caller_locations(*args)
        frames = super(1)
        frames = frames.reject { |l| Child.our_location?(l) } if Child.hiding
        Child.slice_frames(frames, args)
      end
    end

    # `frames` (the caller's own first) as Kernel#caller(*args) slices them.
    def self.slice_frames(frames, args)
      first = args.empty? ? 1 : args[0]
      return frames[first] if first.is_a?(Range)
      return nil if first > frames.size

      args[1] ? frames[first, args[1]] : frames[first..]
    end

    # Exception#backtrace and #backtrace_locations without the worker's frames, once
    # `hiding` is set.
    module HideFrames
      def backtrace
        bt = super
        Child.hiding ? bt&.reject { |line| Child.ours?(line) } : bt
      end

      def backtrace_locations
        bt = super
        Child.hiding ? bt&.reject { |loc| Child.our_location?(loc) } : bt
      end
    end

    def data_after_end(script)
      text = File.binread(script)
      at = text.index(/^__END__\r?\n/)
      return unless at && !Object.const_defined?(:DATA)

      file = File.open(script)
      file.seek(at + text[at..].index("\n") + 1)
      Object.const_set(:DATA, file)
    end
  end
end
