# frozen_string_literal: true

require_relative 'world'
require_relative 'sys'
require_relative 'memo'
require_relative 'resolve_memo'
require_relative 'ahead'

module Ngw
  # The rehearsal: the zygote runs a program's main once, before its hello, on a scratch
  # directory (with HOME, the XDG directories and TMPDIR inside it) and scratch
  # descriptors (stdin from a scratch file, stdout and stderr on /dev/null), and then puts
  # back every piece of Ruby state the run changed (World): globals, modules' instance
  # and class variables, the objects reachable from them, ENV, the directory, `$0`,
  # ARGV, the umask, the standard descriptors. What stays is what no program can read:
  # the interpreter's inline and method caches, filled by the run, and the pages it
  # touched. Children forked afterwards skip that warm-up. What Psych made of the YAML
  # texts the run loaded and parsed, and what ERB compiled of its templates, is kept too
  # (Memo): each is a function of the text and the options. So is where a binstub's
  # `Gem.finish_resolve` did nothing (ResolveMemo).
  #
  # A rehearsal is first tried in a child of the zygote (the trial): it is kept out of the
  # zygote when it changes what cannot be put back: a method defined or a module included
  # in an existing module without a file loaded, a constant reassigned, a file loaded from
  # outside the library directories, a thread, a child process or a descriptor left, an
  # `at_exit` hook registered (the trial's own hooks around the run's see whether any runs
  # between them), a signal's handler, the process group or a resource limit changed, or a
  # world too large to record. The zygote then rehearses the same way and checks again
  # what it can; if that check fails, it is tainted: its sessions run the cold way and it
  # retires.
  class Rehearsal
    # What the built-in rehearsal of rubocop lints: a little of everything its cops look
    # at, with offences.
    RUBOCOP_SAMPLE = <<~'RUBY'
      require 'set'
      module Sample
        class Thing < Struct.new(:name, :size)
          ITEMS = %w[a b c].freeze
          def initialize( name, size = 0 )
            super(name, size)
            @cache = {}
          end

          def each_item
            return enum_for(:each_item) unless block_given?
            ITEMS.each_with_index { |item, i| yield "#{name}-#{item}", i }
          end

          def lookup(key)
            @cache[key] ||= begin
              value = key.to_s.upcase
              value == "" ? nil : value
            end
          rescue StandardError => e
            warn e.message
          end

          def self.build(hash)
            new(hash[:name], hash.fetch(:size, 1)).tap do |t|
              t.lookup(:x) if t.size > 0 and t.name != nil
            end
          end
        end
      end
      x = Sample::Thing.build({ :name => 'n', size: 2 })
      puts x.each_item.map { |s, i| s * i }.join(",") unless x.nil?
    RUBY

    # The start of a scratch directory's name.
    SCRATCH_PREFIX = 'ngw-ruby-rehearsal'

    Verdict = Struct.new(:clean, :reasons, :status, :restored, :features, :ms, keyword_init: true)

    attr_reader :command, :args, :files

    # The built-in rehearsal for `command` (a Zygote::Command), or nil: rubocop lints a
    # scratch file with its result cache off.
    def self.builtin(command)
      return nil if command.interpreter? || File.basename(command.program) != 'rubocop'

      new(command, %w[--cache false rehearsal.rb], { 'rehearsal.rb' => RUBOCOP_SAMPLE })
    end

    def initialize(command, args, files)
      @command = command
      @args = args
      @files = files
    end

    def describe
      "#{@command.name} #{@args.join(' ')}"
    end

    # In the zygote: the trial, in a child; its Verdict.
    def trial(library_dirs)
      return Verdict.new(clean: false, reasons: ['dup2 is unavailable (Fiddle)']) unless Sys.dup2?

      # What the rehearsal itself uses, loaded before the world is recorded.
      require 'tmpdir'
      require 'fileutils'
      Memo.install
      ResolveMemo.install
      Ahead.install
      trial_in_child(library_dirs)
    end

    # In the zygote, after a clean trial: the rehearsal here; its Verdict.
    def perform(library_dirs)
      Memo.recording = true
      ResolveMemo.recording = true
      begin
        own = rehearse(library_dirs)
      ensure
        Memo.recording = false
        ResolveMemo.recording = false
      end
      Memo.seal(own.clean)
      ResolveMemo.seal(own.clean)
      Ahead.seal(own.clean)
      own
    end

    # Forks the trial: it rehearses, checks, and reports its Verdict on a pipe.
    def trial_in_child(library_dirs)
      r, w = IO.pipe
      pid = fork do
        r.close
        trial_main(library_dirs, w)
      rescue SystemExit
        raise
      rescue Exception => e # rubocop:disable Lint/RescueException
        w.write(Marshal.dump({ clean: false, reasons: ["#{e.class}: #{e.message}"] }))
        exit!(1)
      end
      w.close
      data = read_until_end(r, TRIAL_TIMEOUT)
      r.close
      Process.kill('KILL', pid) unless data
      _, st = Process.wait2(pid)
      return Verdict.new(clean: false, reasons: ["the trial took over #{TRIAL_TIMEOUT} s"]) unless data
      return Verdict.new(clean: false, reasons: ["the trial ended with #{st.inspect}"]) if data.empty?

      Verdict.new(**Marshal.load(data)) # rubocop:disable Security/MarshalLoad
    end

    # How long a trial may take (a process the run left may hold its pipe open).
    TRIAL_TIMEOUT = 60

    # What `io` gives until its end, or nil if that takes more than `timeout` seconds.
    def read_until_end(io, timeout)
      deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + timeout
      data = +''.b
      loop do
        left = deadline - Process.clock_gettime(Process::CLOCK_MONOTONIC)
        return nil if left <= 0 || !IO.select([io], nil, nil, left)

        chunk = io.read_nonblock(1 << 16, exception: false)
        return data if chunk.nil?

        data << chunk if chunk.is_a?(String)
      end
    end

    # In the trial's child: the rehearsal, with what only a process about to exit can check:
    # the process's attributes, the signal handlers, children, and `at_exit` hooks (its own
    # hooks, registered before and after the run, see whether any runs between them). The
    # Verdict goes to `out` from the last hook.
    def trial_main(library_dirs, out)
      before = process_attributes
      hooks_ran = false
      at_exit do
        verdict = @verdict
        verdict.reasons << 'at_exit hooks registered' if hooks_ran
        verdict.clean = verdict.reasons.empty?
        out.write(Marshal.dump(verdict.to_h))
        out.close
      end
      @verdict = rehearse(library_dirs)
      after = process_attributes
      before.each { |k, v| @verdict.reasons << "#{k} changed" unless after[k] == v }
      @verdict.reasons << 'a child process left' if child_left?
      tracer = TracePoint.new(:call, :b_call) do |tp|
        path = tp.path.to_s
        hooks_ran = true unless path == __FILE__ || path.empty? || path.start_with?('<internal:')
      end
      at_exit { tracer.enable }
      exit(0)
    end

    # Runs the program once and puts the world back; the Verdict says whether what it
    # changed could all be put back.
    def rehearse(library_dirs)
      t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
      world = World.new
      features = $LOADED_FEATURES.dup
      fds = open_fds
      status = Dir.mktmpdir(SCRATCH_PREFIX) { |scratch| run_main(scratch) }
      loaded = $LOADED_FEATURES - features
      restored, bad = world.restore!(loaded: loaded)
      bad << 'the world is too large to record' if world.truncated
      bad << "#{Thread.list.size - 1} thread(s) left running" if Thread.list.size > 1
      bad << "descriptors left open: #{(open_fds - fds).join(' ')}" unless (open_fds - fds).empty?
      outside = loaded.reject { |f| library_dirs.any? { |d| f.start_with?(d) } }
      bad << "loaded files outside the library directories: #{outside.join(' ')}" unless outside.empty?
      if loaded.empty?
        added = world.new_constants
        bad << "constants defined: #{added.first(5).join(' ')}" unless added.empty?
      end
      Verdict.new(clean: bad.empty?, reasons: bad, status: status, restored: restored.size,
                  features: loaded, ms: ((Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0) * 1000).round)
    end

    private

    def open_fds
      Dir.children('/proc/self/fd').map(&:to_i).sort
    rescue SystemCallError
      []
    end

    # Signals whose handlers Ruby lets a program set.
    TRAPPABLE = (Signal.list.keys - %w[EXIT KILL STOP VTALRM SEGV BUS ILL FPE IOT CLD POLL PIPE]).freeze

    # What a run can change of the process that the World does not hold.
    def process_attributes
      gc_was_disabled = GC.enable
      GC.disable if gc_was_disabled
      attrs = { pgrp: Process.getpgrp, sid: Process.getsid, umask: File.umask,
                'the collector' => gc_was_disabled }
      Process.constants.grep(/\ARLIMIT_/).each do |c|
        attrs[c] = Process.getrlimit(Process.const_get(c))
      rescue SystemCallError, ArgumentError
        nil
      end
      # A handler Ruby does not name (trap answers nil) cannot be read without changing it:
      # such a signal is read once, and left out.
      @unreadable ||= []
      TRAPPABLE.each do |sig|
        next if @unreadable.include?(sig)

        old = Signal.trap(sig, 'SYSTEM_DEFAULT')
        if old.nil?
          @unreadable << sig
        else
          Signal.trap(sig, old)
          attrs["SIG#{sig} handler"] = old
        end
      rescue ArgumentError
        nil
      end
      attrs
    end

    # Whether the run left a child process (running, or exited and not waited for).
    def child_left?
      Process.wait(-1, Process::WNOHANG)
      true
    rescue Errno::ECHILD
      false
    end

    # The program's main, as a session's child runs it, on the scratch directory.
    def run_main(scratch)
      @files.each { |name, text| File.write(File.join(scratch, name), text) }
      %w[home tmp].each { |d| Dir.mkdir(File.join(scratch, d)) }
      stdin_path = File.join(scratch, '.stdin')
      File.write(stdin_path, '')
      saved = { dir: Dir.pwd, umask: File.umask, env: ENV.to_h, argv: ARGV.dup, zero: $PROGRAM_NAME,
                verbose: $VERBOSE, debug: $DEBUG, external: Encoding.default_external,
                internal: Encoding.default_internal,
                warnings: %i[deprecated experimental].to_h { |c| [c, Warning[c]] } }
      std = [STDIN, STDOUT, STDERR]
      std[1..].each { |io| io.flush unless io.closed? }
      keep = (0..2).map do |fd|
        IO.for_fd(fd, autoclose: false).dup
      rescue SystemCallError, ArgumentError
        nil
      end
      File.open(stdin_path) { |f| Sys.dup2(f.fileno, 0) }
      File.open(File::NULL, 'w') do |f|
        Sys.dup2(f.fileno, 1)
        Sys.dup2(f.fileno, 2)
      end
      home = File.join(scratch, 'home')
      ENV.update('HOME' => home, 'XDG_CONFIG_HOME' => File.join(home, '.config'),
                 'XDG_CACHE_HOME' => File.join(home, '.cache'),
                 'XDG_DATA_HOME' => File.join(home, '.local/share'),
                 'XDG_STATE_HOME' => File.join(home, '.local/state'),
                 'TMPDIR' => File.join(scratch, 'tmp'))
      Dir.chdir(scratch)
      $0 = @command.program
      ARGV.replace(@args)
      begin
        RubyVM::InstructionSequence.compile_file(@command.program).eval
        0
      rescue SystemExit => e
        e.status
      rescue ScriptError, StandardError => e
        "#{e.class}: #{e.message}"
      ensure
        [$stdout, $stderr, *std[1..]].each do |io|
          io.flush unless io.closed?
        rescue StandardError
          nil
        end
        drain(STDIN)
        keep.each_with_index do |io, fd|
          if io
            Sys.dup2(io.fileno, fd)
            io.close
          else
            IO.for_fd(fd, autoclose: true).close
          end
        rescue SystemCallError, ArgumentError
          nil
        end
        Dir.chdir(saved[:dir])
        File.umask(saved[:umask])
        ENV.replace(saved[:env])
        ARGV.replace(saved[:argv])
        $0 = saved[:zero]
        $VERBOSE = saved[:verbose]
        $DEBUG = saved[:debug]
        Encoding.default_external = saved[:external]
        Encoding.default_internal = saved[:internal]
        saved[:warnings].each { |c, on| Warning[c] = on }
      end
    end

    # Reads what the run left in STDIN's buffer, so that no byte of the scratch stdin
    # reaches a session.
    def drain(io)
      return if io.closed?

      loop { break unless io.read_nonblock(1 << 16, exception: false).is_a?(String) }
    rescue IOError, SystemCallError
      nil
    end
  end
end
