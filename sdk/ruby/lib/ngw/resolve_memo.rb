# frozen_string_literal: true

require_relative 'memo'
require_relative 'sys'

module Ngw
  # RubyGems' `Gem.finish_resolve` in a binstub's `Gem.activate_bin_path`, skipped where
  # the rehearsal showed it does nothing. After activating the program's gem, a binstub
  # resolves every loaded gem's dependencies against the installed gems (rubocop's: 15-25
  # ms of a warm session, the largest part of its gem activation) and activates what is
  # missing; where nothing is, the call changes nothing a program reads, prints nothing,
  # and its value is thrown away (`activate_bin_path` returns the executable's path).
  #
  # The rehearsal records the state the call starts from: `Gem.path`, the specification
  # directories, the loaded gems (name, version, platform, file) and the unresolved
  # dependencies. Where the call left that state as it was, raised nothing and wrote
  # nothing on the standard streams, the state is kept. A session's call is skipped when
  # it comes from `activate_bin_path` (its source checked once: the call's value is
  # thrown away), starts from a kept state, and RubyGems' resolver, request set,
  # specification and dependency classes are as they were (Memo.watch).
  # The installed gems are the zygote's: the worker watches the specification
  # directories, and a session after a gem was installed or removed runs the cold way
  # (stale code). What the skipped call would have left is RubyGems' lazy caches (full
  # specifications read from stubs), which only make a later read faster.
  module ResolveMemo
    # The lines of `activate_bin_path` that throw the call's value away (RubyGems 3.x).
    CALL_SITE = "      spec.activate\n      finish_resolve\n    end\n    spec.bin_file exec_name\n"

    # Ruby's own `caller_locations`, without a session's frame filters (Child::HideCallers).
    CALLER_LOCATIONS = Kernel.instance_method(:caller_locations)

    @states = {}
    @recording = false
    @serving = false
    @hits = 0

    class << self
      attr_accessor :recording
      attr_reader :hits

      # Makes `Gem.finish_resolve` go through the memo (once), if `activate_bin_path` is
      # the one whose source is known.
      def install
        return unless defined?(::Gem) && ::Gem.respond_to?(:finish_resolve)
        return unless ::Gem.respond_to?(:activate_bin_path)
        return if ::Gem.singleton_class < Hook

        @call_site = known_call_site?
        ::Gem.singleton_class.prepend(Hook) if @call_site
      end

      # After the rehearsal: serves what was recorded if `clean`.
      def seal(clean)
        @serving = clean && !@states.empty?
        @watched = Memo.watch(modules) if @serving
      end

      # The state `finish_resolve` starts from.
      def state
        specs = ::Gem.loaded_specs.map { |n, s| [n, s.version.to_s, s.platform.to_s, s.loaded_from] }
        deps = ::Gem::Specification.unresolved_deps.map { |n, d| [n, d.requirement.to_s, d.type] }
        [::Gem.path, ::Gem::Specification.dirs, specs.sort, deps.sort]
      end

      # Whether the call from `site` (its caller's location: a block's label varies, so
      # the file and line), starting from `now`, can be skipped.
      def skip?(site, now)
        @serving && !@recording && from_call_site?(site) && @states.key?(now) &&
          Memo.unchanged?(@watched)
      end

      def hit
        @hits += 1
      end

      # Runs the call (the block) and keeps `before` if it changed nothing and printed
      # nothing.
      def record(before)
        quiet = nil
        result = silenced { |check| yield.tap { quiet = check.call } }
        @states[before] = true if quiet && state == before
        result
      end

      def size
        @states.size
      end

      def from_call_site?(site)
        site && site.lineno == @line && site.absolute_path == @source
      end

      private

      # Runs the block with fds 1 and 2 on a scratch file (and `$stdout` and `$stderr` the
      # standard streams), giving it a check that nothing was written; without dup2, or
      # with other streams, the check answers false.
      def silenced
        std = [STDOUT, STDERR]
        return yield(-> { false }) unless Sys.dup2? && $stdout.equal?(STDOUT) && $stderr.equal?(STDERR)

        path = File.join(Dir.tmpdir, "ngw-resolve-#{Process.pid}")
        File.open(path, File::RDWR | File::CREAT | File::TRUNC, 0o600) do |scratch|
          File.unlink(path)
          std.each(&:flush)
          keep = [1, 2].map { |fd| IO.for_fd(fd, autoclose: false).dup }
          begin
            [1, 2].each { |fd| Sys.dup2(scratch.fileno, fd) }
            yield(lambda do
              std.each(&:flush)
              scratch.size.zero?
            end)
          ensure
            std.each { |io| io.flush unless io.closed? }
            keep.each_with_index do |io, i|
              Sys.dup2(io.fileno, i + 1)
              io.close
            end
          end
        end
      end

      def known_call_site?
        # RubyGems' own method, under whatever was prepended to it.
        method = ::Gem.method(:activate_bin_path)
        method = method.super_method while method && method.owner != ::Gem.singleton_class
        file, = method&.source_location
        text = file && File.read(file)
        at = text&.index(CALL_SITE)
        return false unless at

        @source = file
        # The line of the call.
        @line = text[0, at].count("\n") + 2
        true
      rescue SystemCallError
        false
      end

      def modules
        %i[Resolver RequestSet Specification StubSpecification BasicSpecification Dependency Requirement
           Version].flat_map do |name|
          loaded = ::Gem.const_defined?(name, false) && !::Gem.autoload?(name)
          loaded ? Memo.namespace(::Gem.const_get(name, false)) : []
        end + [::Gem]
      end
    end

    # `Gem.finish_resolve`, through the memo.
    module Hook
      def finish_resolve(*args)
        return super unless args.empty?

        # (Through bind_call, level 1 is this frame.)
        site = CALLER_LOCATIONS.bind_call(self, 2, 1).first
        now = ResolveMemo.state
        if ResolveMemo.skip?(site, now)
          ResolveMemo.hit
          return nil
        end
        return super unless ResolveMemo.recording && ResolveMemo.from_call_site?(site)

        ResolveMemo.record(now) { super }
      end
    end
  end
end
