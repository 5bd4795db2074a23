# frozen_string_literal: true

require_relative 'memo'

module Ngw
  # rubocop's default configuration, built ahead of the session by the spare that will
  # run it (~27 ms of a warm rubocop session).
  #
  # rubocop 1.39 builds its default configuration (`RuboCop::ConfigLoader
  # .default_configuration`, memoised in the loader) from `config/default.yml` and the
  # current directory (its `Exclude` paths are made absolute from `Dir.pwd`), and
  # validates it against the obsoletion rules (`config/obsoletion.yml`). It reads no other
  # file, no variable and nothing else of the directory, and it is the same for a project
  # with its own `.rubocop.yml` (merged into it later, in every session). What a build
  # depends on is then the code that builds it, the cops registered, the loader's options
  # (`--debug` prints while it builds), the directory, the environment and those files.
  #
  # A spare forked after a rubocop session builds it for that session's directory and
  # environment (`prepare`) and puts back what the build left elsewhere (the loader's memo
  # and resolver, the cop registry's memo of unqualified names). It keeps the result
  # aside if the build printed nothing, loaded nothing and read no file but those two.
  # The memos serve the build without their pristine copies, which stay for the session
  # (Memo.aside). The session's first call of `default_configuration` (Hook) takes it only
  # if, at that moment, everything it depends on is as it was when it was built: the
  # directory, the whole environment, the loader's options and FileFinder's root level,
  # the files loaded and the cops registered (a plugin a `.rubocop.yml` requires adds
  # both), which files the rules are read from and their signatures (size, times, inode,
  # taken before the build read them), and the methods and ancestors of rubocop's
  # configuration classes and of Psych and ERB (watched as Memo watches, from the end of
  # the rehearsal). Otherwise the session builds it as a cold run does, and the spare's
  # build left nothing behind.
  module Ahead
    # The version whose loader is known, and its method's source, word for word.
    VERSION = '1.39.0'
    SOURCE = <<~'RUBY'.gsub(/^(?=.)/, '      ')
      def default_configuration
        @default_configuration ||= begin
          print 'Default ' if debug?
          load_file(DEFAULT_FILE)
        end
      end
    RUBY
    # The loader's options, read at the build and at the take.
    FLAGS = %i[debug ignore_parent_exclusion disable_pending_cops enable_pending_cops
               ignore_unrecognized_cops].freeze

    # What a build printed goes here, to be counted.
    class Sink
      attr_reader :bytes

      def initialize
        @bytes = 0
      end

      def write(*args)
        args.sum { |a| a.to_s.bytesize }.tap { |n| @bytes += n }
      end

      def print(*args)
        write(*args)
        nil
      end

      def puts(*args)
        write(*args, "\n")
        nil
      end

      def flush
        self
      end

      def sync
        true
      end

      def tty?
        false
      end
      alias isatty tty?
    end

    @installed = false
    @watched = nil
    @prepared = nil
    @outcome = nil

    class << self
      # What became of this process's build: nil (none), :served, or why it was not.
      attr_reader :outcome

      # In the zygote, before the rehearsal: the hook, where rubocop's loader is 1.39's.
      def install
        return if @installed || !known?

        ::RuboCop::ConfigLoader.singleton_class.prepend(Hook)
        @installed = true
      end

      def known?
        return false unless defined?(::RuboCop::ConfigLoader) && defined?(::RuboCop::Version::STRING)
        return false unless ::RuboCop::Version::STRING == VERSION

        file, = ::RuboCop::ConfigLoader.method(:default_configuration).source_location
        file && File.read(file).include?(SOURCE)
      rescue SystemCallError, NameError
        false
      end

      # In the zygote, after a clean rehearsal: watches rubocop's configuration classes.
      def seal(clean)
        return unless @installed && clean

        mods = %w[ConfigLoader ConfigLoaderResolver Config ConfigValidator ConfigObsoletion ConfigFinder
                  FileFinder PathUtil Cop::Registry Cop::Badge YAMLDuplicationChecker]
        mods = mods.flat_map { |n| Memo.namespace(::RuboCop.const_get(n)) }
        mods += Memo.namespace(::Psych) if defined?(::Psych)
        mods += Memo.namespace(::ERB) if defined?(::ERB)
        @watched = Memo.watch(mods.uniq)
      rescue NameError
        @watched = nil
      end

      def ready?
        !@watched.nil?
      end

      # In a spare: builds the default configuration for the directory `dir` and the
      # environment `env` (the previous session's, as the child would set them), and keeps
      # it aside if the build printed nothing, loaded nothing and raised nothing.
      def prepare(dir, env)
        return unless ready? && Memo.unchanged?(@watched)

        loader = ::RuboCop::ConfigLoader
        return unless loader.instance_variable_get(:@default_configuration).nil?

        registry = ::RuboCop::Cop::Registry.global
        saved = { loader => ivars(loader, %i[@default_configuration @resolver]),
                  registry => ivars(registry, %i[@unqualified_cop_names]) }
        home = Dir.pwd
        old_env = ENV.to_h
        out = $stdout
        err = $stderr
        sink = Sink.new
        features = $LOADED_FEATURES.size
        # The files the build reads, signed before it reads them: a write during the build
        # makes the build stale.
        signed = inputs.to_h { |f| [f, signature(f)] }
        built = nil
        begin
          Dir.chdir(dir)
          ENV.replace(env)
          state = self.state
          $stdout = $stderr = sink
          mark = Zygote::Recorder.checkpoint
          Zygote::Recorder.rollback([{}, {}, {}])
          Zygote::Recorder.start
          built = Memo.aside { loader.default_configuration }
        ensure
          _, opened, = Zygote::Recorder.stop
          Zygote::Recorder.rollback(mark) if mark
          $stdout = out
          $stderr = err
          ENV.replace(old_env)
          Dir.chdir(home)
          saved.each { |obj, vars| put_back(obj, vars) }
        end
        return unless sink.bytes.zero? && $LOADED_FEATURES.size == features && built
        # Any other file read is an input the check would not know.
        return unless opened.all? { |f| signed.key?(f) }

        @prepared = { config: built, state: state, files: signed }
      rescue StandardError, ScriptError
        @prepared = nil
      end

      # In the session, at the first call of `default_configuration`: the prepared
      # configuration if it is what this call would build, or nil (and why, in `outcome`).
      def take
        prepared = @prepared
        return nil unless prepared

        @prepared = nil
        t0 = Profile.now
        why = mismatch(prepared)
        @outcome = why || :served
        Profile.note(:config_ahead, @outcome)
        Profile.add(:config_check, Profile.now - t0)
        why ? nil : prepared[:config]
      end

      # The files the build reads: `default.yml` and the obsoletion rules (a plugin adds its
      # own to ConfigObsoletion.files).
      def inputs
        files = [::RuboCop::ConfigLoader::DEFAULT_FILE, *::RuboCop::ConfigObsoletion.files]
        files.map { |f| File.expand_path(f) }
      end

      # What the build depends on, now.
      def state
        loader = ::RuboCop::ConfigLoader
        registry = ::RuboCop::Cop::Registry.global
        { dir: Dir.pwd, env: ENV.to_h, flags: FLAGS.map { |f| loader.public_send(f) },
          root_level: ::RuboCop::FileFinder.instance_variable_get(:@root_level), inputs: inputs,
          features: [$LOADED_FEATURES.size, $LOADED_FEATURES.last],
          cops: %i[@registry @enrollment_queue].sum { |v| registry.instance_variable_get(v)&.size.to_i } }
      end

      private

      def mismatch(prepared)
        return 'rubocop or Psych or ERB changed' unless Memo.unchanged?(@watched)

        now = state
        changed = prepared[:state].find { |k, v| now[k] != v }
        return "#{changed[0]} changed" if changed

        file = prepared[:files].find { |f, sig| signature(f) != sig }
        return "#{file[0]} changed" if file

        nil
      end

      def signature(path)
        st = File.stat(path)
        [st.size, st.mtime.to_r, st.ctime.to_r, st.ino]
      rescue SystemCallError
        :missing
      end

      def ivars(obj, names)
        names.to_h { |v| [v, obj.instance_variable_defined?(v) ? [obj.instance_variable_get(v)] : nil] }
      end

      def put_back(obj, vars)
        vars.each do |v, was|
          if was
            obj.instance_variable_set(v, was[0])
          elsif obj.instance_variable_defined?(v)
            obj.remove_instance_variable(v)
          end
        end
      end
    end

    # `RuboCop::ConfigLoader.default_configuration`, taking the prepared configuration at
    # the first call where it is what the call would build.
    module Hook
      def default_configuration
        if @default_configuration.nil? && (built = Ahead.take)
          self.default_configuration = built
        end
        super
      end
    end
  end
end
