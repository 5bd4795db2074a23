# frozen_string_literal: true

require 'rbconfig'
require_relative 'wire'
require_relative 'rehearsal'

module Ngw
  # What the zygote is: the commands it serves, what it preloaded, the environment that
  # preloading depends on and whether its standard streams were terminals where preloading
  # asked (its key), the files it loaded (watched for changes), and the preloads learned
  # from earlier sessions.
  #
  # A command is either a program (`NAME=PATH`: a Ruby script such as a RubyGems binstub,
  # run as `ruby PATH ARGS`) or the interpreter itself (`NAME` alone: `NAME SCRIPT ARGS`
  # runs SCRIPT as `ruby SCRIPT ARGS` does; any other form of the command line, such as
  # options before the script, runs the real `ruby`).
  class Zygote
    # Variables fixed when Ruby and RubyGems start: part of every zygote's key.
    KEY_VARS = %w[RUBYOPT RUBYLIB GEM_HOME GEM_PATH GEM_SPEC_CACHE BUNDLE_GEMFILE
                  LANG LC_ALL LC_CTYPE].freeze

    Command = Struct.new(:name, :program) do
      # The interpreter form: the first argument is the script.
      def interpreter?
        program.nil?
      end
    end

    attr_reader :commands, :key_vars, :key_ttys, :own_ttys, :preloaded, :failed, :delta, :tainted

    def initialize(commands, state_dir:, preloads:, log:, rehearsals: [])
      @commands = commands
      @rehearsals = rehearsals
      @tainted = nil
      @state_dir = state_dir
      @explicit = preloads
      @log = log
      @start_env = ENV.to_h.reject { |k, _| k.start_with?('NGW_') }
      @key_vars = KEY_VARS.dup
      @key_ttys = {}
      # Whether the zygote's own fds 0-2 are terminals (ngd gives it none).
      @own_ttys = (0..2).to_h do |fd|
        [fd, IO.for_fd(fd, autoclose: false).tty?]
      rescue SystemCallError, ArgumentError
        [fd, nil]
      end
      @watch = {}
      @preloaded = []
      @failed = []
    end

    # The line of the learned preloads that says a session of this program asked whether a
    # standard stream is a terminal while it loaded a library, and got another answer than
    # the zygote's streams give: the program runs on terminals.
    TTY_MARK = '!tty'
    # The line of the learned preloads that says a zygote found its rehearsal changed what
    # it could not put back, where its trial had not: its successors do not rehearse.
    NO_REHEARSAL_MARK = '!no-rehearsal'

    # The file learned preloads are kept in, one feature path a line (and TTY_MARK).
    def learned_path
      File.join(@state_dir, "#{(ENV['NGW_PLUGIN'] || 'ngw-ruby').gsub(/[^\w.-]/, '_')}.preload")
    end

    def learned
      File.exist?(learned_path) ? File.read(learned_path).split("\n").reject(&:empty?) : []
    rescue SystemCallError
      []
    end

    # Requires what the zygote preloads: the explicit `--preload` features, then the
    # learned ones, recording every environment variable read and every file opened on
    # the way. A learned feature that fails is skipped (and logged); an explicit one that
    # fails is an error, raised.
    def preload!
      Recorder.start
      @explicit.each do |feature|
        require feature
        @preloaded << feature
      end
      paths = learned
      no_rehearsal = paths.delete(NO_REHEARSAL_MARK)
      on_terminals = paths.delete(TTY_MARK)
      asking = on_terminals ? ask_tty(paths) : []
      unless asking.empty?
        @log.call("left out #{asking.size} learned preload(s) that ask whether a standard " \
                  "stream is a terminal: #{asking.join(' ')}")
      end
      (paths - asking).each do |path|
        next if $LOADED_FEATURES.include?(path)

        # Its signature from before it is read: a write that lands while it loads (an
        # editor saving it) makes it stale, rather than the half-written text's signature.
        watch(path)
        begin
          require path
          @preloaded << path
        rescue ScriptError, StandardError => e
          @failed << path
          @log.call("learned preload #{path} failed: #{e.class}: #{e.message}")
        end
      end
      @no_rehearsal = no_rehearsal
    ensure
      finish_recording
    end

    # Runs the rehearsals (after the hello: a session that comes meanwhile waits for them),
    # recording as preloading does.
    def rehearse!
      if @rehearsals.empty?
        nil
      elsif @no_rehearsal
        @log.call('no rehearsal: an earlier zygote could not put back what its rehearsal changed')
      elsif @preloaded.empty?
        @log.call('no rehearsal: nothing preloaded yet (the first session teaches what to preload)')
      else
        Recorder.start
        begin
          @rehearsals.each { |r| rehearse(r) }
        ensure
          finish_recording
        end
      end
    end

    # What preloading (or a rehearsal) recorded becomes the key, and the files loaded or
    # opened are watched.
    def finish_recording
      read, opened, ttys = Recorder.stop
      @key_vars |= read.reject { |name| name.start_with?('NGW_') }
      @key_ttys = ttys
      (($LOADED_FEATURES.select { |f| f.start_with?('/') }) + opened.to_a).each { |f| watch(f) }
      @commands.each { |c| watch(c.program) if c.program }
      gem_dirs.each { |d| watch_dir(d) }
      @delta = compute_delta
    end

    # Runs the rehearsal `rehearsal` (Rehearsal): its trial in a child, then, if it is
    # clean, here. What preloading records (the variables read, the answers of `tty?`, the
    # files opened) keeps only what the rehearsal did while it loaded files: the rest of
    # its state is put back, so nothing else it read is the zygote's.
    def rehearse(rehearsal)
      trial = rehearsal.trial(Zygote.library_dirs)
      unless trial.clean
        @log.call("rehearsal #{rehearsal.describe} left out: its trial changed what cannot be put back: " \
                  "#{trial.reasons.first(5).join('; ')}")
        return
      end
      # What the trial's run loaded is loaded first, as a preload: then what loading it
      # read is in the key, and what the run itself reads is not.
      trial.features.each do |f|
        require f
      rescue ScriptError, StandardError => e
        @log.call("the rehearsal's #{f} failed to load: #{e.class}: #{e.message}")
      end
      mark = Recorder.checkpoint
      own = rehearsal.perform(Zygote.library_dirs)
      # An encoding's extension (Psych loads UTF-16's on first use, by another feature name
      # than its path) reads nothing and defines nothing a program can see.
      if own.features.reject { |f| f.include?('/enc/') }.empty?
        Recorder.rollback(mark)
      else
        Recorder.forget_rehearsal_files
      end
      if own.clean
        @log.call("rehearsed #{rehearsal.describe} (exit #{own.status}) in #{own.ms} ms " \
                  "(trial #{trial.ms} ms): put back #{own.restored} change(s), loaded #{own.features.size} " \
                  "file(s), kept #{Memo.size} result(s) of YAML and ERB and #{ResolveMemo.size} " \
                  'gem resolution(s)')
        @log.call("the rehearsal loaded #{own.features.join(' ')}") unless own.features.empty?
        return
      end
      taint("the rehearsal #{rehearsal.describe} changed what cannot be put back: #{own.reasons.first}")
    rescue StandardError, ScriptError => e
      taint("the rehearsal #{rehearsal.describe} failed: #{e.class}: #{e.message}")
    end

    # The zygote's state is not what its preloads made: its sessions run the cold way, and
    # its successors do not rehearse.
    def taint(why)
      @tainted = why
      @log.call("#{why}; sessions run the cold way")
      remember(NO_REHEARSAL_MARK)
    end

    # Adds `line` to the learned preloads' file.
    def remember(line)
      old = learned
      return if old.include?(line)

      Dir.mkdir(@state_dir) unless Dir.exist?(@state_dir)
      File.write(learned_path, (old + [line]).join("\n") << "\n")
    rescue SystemCallError => e
      @log.call("cannot save learned preloads: #{e.message}")
    end

    # A full collection, three times, so that every object the zygote keeps is old: a
    # child's minor collections then leave the zygote's objects (and the pages they are
    # on) alone.
    def settle_heap
      3.times { GC.start(full_mark: true, immediate_sweep: true) }
    end

    # The first of the learned preloads `paths` whose loading asks whether a standard
    # stream is a terminal, and every one after it (which may depend on it), found by
    # requiring them in order in a child: preloaded, the first would decide by the
    # zygote's streams, and a session on a terminal would run the cold way.
    def ask_tty(paths)
      r, w = IO.pipe
      pid = fork do
        r.close
        paths.each do |path|
          before = Recorder.asked
          begin
            require path
          rescue ScriptError, StandardError
            nil
          end
          next unless Recorder.asked > before

          w.puts(paths[paths.index(path)..])
          break
        end
        w.close
        exit!(0)
      end
      w.close
      found = r.read.split("\n")
      r.close
      Process.wait(pid)
      found
    end

    # Variables that Ruby's start-up or the preload set or removed: a cold run would do the
    # same, so each session's child does it again ({name => value or nil}).
    def compute_delta
      now = ENV.to_h.reject { |k, _| k.start_with?('NGW_') }
      delta = {}
      now.each { |k, v| delta[k] = v if @start_env[k] != v }
      (@start_env.keys - now.keys).each { |k| delta[k] = nil }
      delta
    end

    # Why the client's environment `env` cannot be served by this zygote, or nil.
    # `ttys` says which of the session's fds 0-2 are terminals ({fd => true/false, nil
    # when closed}).
    def key_mismatch(env, ttys)
      @key_vars.each do |name|
        next if env[name] == @start_env[name]

        return "#{name} differs from the zygote's"
      end
      @key_ttys.each do |fd, was|
        next if ttys[fd] == was

        return "preloading asked whether #{STREAMS[fd]} is a terminal (#{was ? 'it was' : 'it was not'}), " \
               "and the session's #{ttys[fd] ? 'is' : 'is not'}"
      end
      nil
    end

    STREAMS = %w[stdin stdout stderr].freeze

    # Watches `path` from now on. The first signature taken stays: a later call does not
    # take in a change made since.
    def watch(path)
      return if @watch.key?(path)

      st = File.stat(path)
      @watch[path] = [st.mtime.to_r, st.size, st.ino] if st.file?
    rescue SystemCallError
      nil
    end

    # Where RubyGems finds the installed gems' specifications: a gem installed or removed
    # there adds or removes a file, which changes the directory's modification time.
    def gem_dirs
      return [] unless defined?(::Gem::Specification)

      dirs = ::Gem::Specification.dirs
      dirs += [::Gem.default_specifications_dir] if ::Gem.respond_to?(:default_specifications_dir)
      dirs.uniq
    rescue StandardError
      []
    end

    # Watches the directory `path` (its entries, by its modification time and inode),
    # and one that does not exist until it does.
    def watch_dir(path)
      @watch[path] ||= dir_signature(path)
    end

    def dir_signature(path)
      st = File.stat(path)
      st.directory? ? [:dir, st.mtime.to_r, st.ino] : [:other]
    rescue SystemCallError
      [:missing]
    end

    # The first watched file or directory that changed since preloading (or is gone), or
    # nil.
    def changed_file
      @watch.each do |path, sig|
        if sig[0].is_a?(Symbol)
          return path if dir_signature(path) != sig

          next
        end
        st = File.stat(path)
        return path if sig != [st.mtime.to_r, st.size, st.ino]
      rescue SystemCallError
        return path
      end
      nil
    end

    def watched_count
      @watch.size
    end

    # Someone asked `stream.tty?` and got `answer`: for fds 0-2, recorded while preloading, and
    # noted by a session's learning.
    def self.asked_tty(stream, answer)
      fd = stream.fileno
      return unless fd.between?(0, 2)

      Recorder.tty(fd, answer)
      @tty_listener&.call(fd, answer)
    rescue IOError
      nil
    end

    class << self
      attr_accessor :tty_listener
    end

    # The directories whose files may be learned as preloads: the standard library's and
    # the installed gems', never the program's own or the user's files.
    def self.library_dirs
      dirs = [RbConfig::CONFIG['rubylibprefix'], RbConfig::CONFIG['vendordir'],
              RbConfig::CONFIG['sitedir'], RbConfig::CONFIG['rubyarchdir'],
              RbConfig::CONFIG['vendorarchdir'], RbConfig::CONFIG['sitearchdir'],
              '/usr/share/rubygems-integration', '/usr/lib/ruby']
      dirs += Gem.path if defined?(Gem)
      dirs.compact.reject(&:empty?).map { |d| d.end_with?('/') ? d : "#{d}/" }.uniq
    end

    # Adds the features a session loaded (absolute paths, in load order) to the learned
    # preloads; returns how many were new.
    def learn(features)
      dirs = Zygote.library_dirs
      old = learned
      known = old.to_h { |f| [f, true] }
      fresh = features.select do |f|
        !known[f] && f.end_with?('.rb', '.so') && dirs.any? { |d| f.start_with?(d) }
      end
      fresh << TTY_MARK if features.include?(TTY_MARK) && !known[TTY_MARK]
      return 0 if fresh.empty?

      Dir.mkdir(@state_dir) unless Dir.exist?(@state_dir)
      tmp = "#{learned_path}.#{Process.pid}"
      File.write(tmp, (old + fresh).join("\n") << "\n")
      File.rename(tmp, learned_path)
      fresh.size
    rescue SystemCallError => e
      @log.call("cannot save learned preloads: #{e.message}")
      0
    end

    # Records, while the zygote preloads, the environment variables read through ENV, the
    # files opened through File.open / IO.read and friends, and the answers of `tty?` and
    # `isatty` on fds 0-2 (a library that decides at load time by whether its output is a
    # terminal, as reline and rainbow do, holds that answer in every child).
    module Recorder
      @on = false
      @read = {}
      @opened = {}
      @ttys = {}
      @asked = 0

      class << self
        attr_reader :read, :opened, :asked

        def on?
          @on
        end

        def start
          @on = true
          ENV.singleton_class.prepend(EnvHook) unless ENV.singleton_class < EnvHook
          File.singleton_class.prepend(FileHook) unless File.singleton_class < FileHook
          IO.prepend(TtyHook) unless IO < TtyHook
        end

        def stop
          @on = false
          [@read.keys, @opened.keys, @ttys.dup]
        end

        # What has been recorded so far, to roll back to.
        def checkpoint
          [@read.dup, @opened.dup, @ttys.dup]
        end

        def rollback(mark)
          @read, @opened, @ttys = mark
        end

        # Forgets the files opened in a rehearsal's scratch directory.
        def forget_rehearsal_files
          @opened.delete_if { |path, _| path.include?("/#{Rehearsal::SCRATCH_PREFIX}") }
        end

        def tty(stream_fd, answer)
          return unless @on

          @asked += 1
          @ttys[stream_fd] = answer unless @ttys.key?(stream_fd)
        end

        def env(name)
          @read[name.to_s] = true if @on && name
        end

        def file(path)
          return unless @on && (path.is_a?(String) || path.respond_to?(:to_path))

          @opened[File.expand_path(path)] = true
        rescue StandardError
          nil
        end
      end

      # ENV's readers, recording the name asked for.
      module EnvHook
        %i[[] fetch key? include? has_key? member?].each do |m|
          define_method(m) do |name, *rest, &blk|
            Recorder.env(name)
            super(name, *rest, &blk)
          end
        end
      end

      # IO#tty? and #isatty, recording the answer for fds 0-2 while the recorder is on, and
      # telling the session's learning (Session::RequireHook) that a require asked.
      module TtyHook
        def tty?
          answer = super
          Ngw::Zygote.asked_tty(self, answer)
          answer
        end

        def isatty
          answer = super
          Ngw::Zygote.asked_tty(self, answer)
          answer
        end
      end

      # File's openers, recording the path opened.
      module FileHook
        %i[open read readlines foreach binread new].each do |m|
          define_method(m) do |path, *rest, **kw, &blk|
            Recorder.file(path)
            super(path, *rest, **kw, &blk)
          end
        end
      end
    end
  end
end
