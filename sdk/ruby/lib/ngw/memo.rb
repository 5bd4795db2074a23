# frozen_string_literal: true

module Ngw
  # Results of pure functions of a text that the rehearsal computed, kept in the zygote
  # for its sessions: what `Psych.safe_load` and `Psych.parse` made of a YAML text, what
  # `ERB::Compiler#compile` made of a template (the Ruby source ERB evaluates), and
  # whether rubocop's duplicate-key check found a duplicate (DuplicateCheckHook). Each
  # is a function of the text and the options only (the compiler's settings, for ERB), so
  # a session that asks again with the same text and options gets what it would have
  # computed: rubocop builds its default configuration twice a run (ERB 5 ms, the
  # duplicate-key `parse` 15 ms and `safe_load` 25 ms, each time).
  #
  # How a session gets a result:
  #
  # * **Pristine copies.** After the rehearsal the zygote makes, for each YAML text, as
  #   many fresh results as the rehearsal asked for (at most MAX_COPIES): a session's
  #   first ask gets the first, its second the second, and so on. A session is a fork of
  #   the zygote, so those objects are the session's own (copy-on-write): handing one out
  #   costs nothing, and no session sees what another did to it.
  # * **Past them**, a `safe_load` result is a fresh copy of its Marshal dump (plain data
  #   only, below); a `parse` is parsed again (copying its node tree costs more than
  #   parsing). A compiled template is strings: each ask gets fresh copies.
  #
  # What is kept: `safe_load` results of plain data (Hash, Array, String, Symbol, numbers,
  # true, false, nil, Regexp), never with `freeze: true`; `parse` results of a String
  # text; templates compiled by a plain `ERB::Compiler`. Never an error, never for an IO,
  # at most MAX_BYTES of text in all. A result is served only while the modules under
  # `Psych` (for YAML) and `ERB` (for templates), and those under RubyGems that
  # ResolveMemo watches, are as the zygote had them: no method defined, removed or
  # undefined in any of them (Watch hears of it) and the same ancestors (compared at each
  # ask). A program that redefines or prepends into them computes for itself.
  module Memo
    MAX_BYTES = 8 << 20
    # Fresh results kept per YAML text and options.
    MAX_COPIES = 4
    PLAIN = [String, Symbol, Integer, Float, TrueClass, FalseClass, NilClass, Regexp].freeze

    # One kept result: what was asked (`kind`, `text`, `options`), how many times the
    # rehearsal asked, and the result (a Marshal dump for `safe_load`, frozen strings for
    # a template, nothing for `parse`).
    Entry = Struct.new(:kind, :text, :options, :asked, :result)

    @entries = {}
    @bytes = 0
    @pristine = {}
    @taken = Hash.new(0)
    @hits = Hash.new(0)
    @recording = false
    @serving = false
    @watched = {}
    @changed = false

    class << self
      attr_accessor :recording
      attr_reader :serving

      def size
        @entries.size
      end

      # How many asks of each kind this process was served from the memo.
      def hits
        @hits.dup
      end

      # Runs the block with the pristine copies left for the session, and its asks not
      # counted in `hits` (Ahead's build in a spare: the session that builds its own
      # configuration after all gets the copies).
      def aside
        hits = @hits.dup
        @aside = true
        yield
      ensure
        @aside = false
        @hits = hits
      end

      # Makes Psych's `safe_load` and `parse`, and ERB's compiler and rubocop's
      # duplicate-key check if they are loaded, go through the memo (once).
      def install
        if defined?(::Psych) && ::Psych.respond_to?(:safe_load) && !(::Psych.singleton_class < YamlHook)
          ::Psych.singleton_class.prepend(YamlHook)
        end
        install_duplicate_check
        return unless defined?(::ERB::Compiler) && ::ERB::Compiler.method_defined?(:compile)

        ::ERB::Compiler.prepend(ErbHook) unless ::ERB::Compiler < ErbHook
      end

      # rubocop's duplicate-key check, if its source is the one DuplicateCheckHook knows.
      def install_duplicate_check
        return unless defined?(::RuboCop::YAMLDuplicationChecker)

        checker = ::RuboCop::YAMLDuplicationChecker
        return if checker.singleton_class < DuplicateCheckHook

        file, = checker.method(:check).source_location
        return unless file && File.read(file).include?(DuplicateCheckHook::SOURCE)

        checker.singleton_class.prepend(DuplicateCheckHook)
      rescue SystemCallError, NameError
        nil
      end

      # After the rehearsal: serves what was recorded if `clean`, having made the pristine
      # copies and started watching the modules' methods.
      def seal(clean)
        @serving = clean && !@entries.empty?
        return unless @serving

        @watched = {}
        @watched[:yaml] = watch(namespace(::Psych)) if defined?(::Psych)
        @watched[:erb] = watch(namespace(::ERB)) if defined?(::ERB)
        if defined?(::RuboCop::YAMLDuplicationChecker)
          @watched[:duplicates] = watch(namespace(::RuboCop::YAMLDuplicationChecker))
        end
        @entries.each do |k, e|
          next if %i[erb duplicates].include?(e.kind)

          @pristine[k] = Array.new([e.asked, MAX_COPIES].min) { fresh(e) }.compact
        end
      end

      def key(kind, text, options)
        [kind, text.encoding, text, options]
      end

      # What asking `kind` of `text` with `options` makes, served; or nil.
      def lookup(kind, text, options)
        return nil unless @serving && !@recording

        k = key(kind, text, options)
        entry = @entries[k]
        return nil unless entry && intact?(kind == :erb ? :erb : :yaml)
        return nil if kind == :duplicates && !intact?(:duplicates)

        found = serve(k, entry)
        @hits[kind] += 1 unless found.nil?
        found
      end

      def record(kind, text, options, result)
        return unless @recording

        k = key(kind, text, options)
        if (entry = @entries[k])
          entry.asked += 1
          return
        end
        return unless @bytes + text.bytesize <= MAX_BYTES

        kept = keepable(kind, result)
        return if kept.nil?

        frozen = text.frozen? ? text : text.dup.freeze
        # A deep copy: the caller may change what it passed.
        options = Marshal.load(Marshal.dump(options)).freeze
        @entries[key(kind, frozen, options)] = Entry.new(kind, frozen, options, 1, kept)
        @bytes += text.bytesize
      rescue TypeError, ArgumentError
        nil
      end

      # Whether `obj` is plain data, all the way down (a String not frozen unless it is a
      # hash key, no instance variables).
      def plain?(obj, key, depth = 0)
        return false if depth > 200

        case obj
        when Hash
          obj.instance_of?(Hash) && obj.default_proc.nil? && obj.default.nil? && !obj.compare_by_identity? &&
            obj.instance_variables.empty? &&
            obj.all? { |k, v| plain?(k, true, depth + 1) && plain?(v, false, depth + 1) }
        when Array
          obj.instance_of?(Array) && !obj.frozen? && obj.instance_variables.empty? &&
            obj.all? { |e| plain?(e, false, depth + 1) }
        when String
          obj.instance_of?(String) && obj.frozen? == key && obj.instance_variables.empty?
        else
          PLAIN.any? { |c| obj.instance_of?(c) } && (!obj.is_a?(Regexp) || obj.instance_variables.empty?)
        end
      end

      # Calls the methods underneath the hooks (making the pristine copies).
      def bypass
        was = @bypass
        @bypass = true
        yield
      ensure
        @bypass = was
      end

      def bypassed?
        @bypass
      end

      private

      # What is kept of `result`, or nil if it is not kept.
      def keepable(kind, result)
        case kind
        when :safe_load then plain?(result, false) ? Marshal.dump(result) : nil
        when :parse then result.is_a?(::Psych::Nodes::Document) ? true : nil
        when :erb
          script, *magic = result[:out]
          return nil unless script.instance_of?(String) && result[:content].instance_of?(String)

          [script.dup.freeze, magic.freeze, result[:content].dup.freeze].freeze
        when :duplicates then result == :none ? true : nil
        end
      end

      # A new result for `entry`, made as the session would make it.
      def fresh(entry)
        case entry.kind
        when :safe_load then Marshal.load(entry.result) # rubocop:disable Security/MarshalLoad
        when :parse then bypass { ::Psych.parse(entry.text, **entry.options) }
        end
      rescue StandardError
        nil
      end

      def serve(key, entry)
        return true if entry.kind == :duplicates

        if entry.kind == :erb
          script, magic, content = entry.result
          return { out: [script.dup, *magic], content: content.dup }
        end
        copies = @pristine[key]
        if copies && @taken[key] < copies.size && !@aside
          @taken[key] += 1
          return copies[@taken[key] - 1]
        end
        entry.kind == :safe_load ? fresh(entry) : nil
      end

      # Whether the modules of `which` (:yaml, :erb) are as they were when sealed.
      def intact?(which)
        was = @watched[which]
        was && unchanged?(was)
      end

      public

      # `mod` and the modules named under it.
      def namespace(mod, into = {})
        return into.keys if into.key?(mod)

        into[mod] = true
        mod.constants(false).each do |c|
          next if mod.autoload?(c)

          value = mod.const_get(c, false)
          namespace(value, into) if value.is_a?(Module) && value.name.to_s.start_with?("#{mod.name}::")
        rescue StandardError, LoadError
          nil
        end
        into.keys
      end

      # `mods` without the worker's own (a session's child prepends its frame filters to
      # Kernel and Exception).
      def theirs(mods)
        mods.reject { |m| m.name.to_s.start_with?('Ngw::') }
      end

      # Watches `mods` from now on (Watch, prepended to each one's singleton class, hears
      # of every method defined, removed or undefined in them or on them) and returns
      # their ancestors now, for `unchanged?`.
      def watch(mods)
        mods.each { |m| m.singleton_class.prepend(Watch) unless m.singleton_class < Watch }
        ancestry(mods)
      end

      # Whether no method of a watched module was defined, removed or undefined since it
      # was watched, and the modules of `was` (from `watch`) have the ancestors they had.
      def unchanged?(was)
        !@changed && ancestry(was.keys) == was
      end

      def changed!
        @changed = true
      end

      def ancestry(mods)
        mods.to_h { |m| [m, [theirs(m.ancestors), theirs(m.singleton_class.ancestors)]] }
      end
    end

    # Hears of a method defined, removed or undefined in a watched module or on it (Ruby
    # calls these hooks for methods defined in Ruby and in C alike).
    module Watch
      HOOKS = %i[method_added method_removed method_undefined singleton_method_added singleton_method_removed
                 singleton_method_undefined].freeze

      private

      HOOKS.each do |hook|
        define_method(hook) do |name|
          Memo.changed!
          super(name)
        end
      end
    end

    # rubocop's duplicate-key check of a configuration's YAML (~15 ms for its default
    # configuration), through the memo: where the rehearsal's check of the same text and
    # file name found no duplicate key, a session's parses the text (from the memo) and
    # returns what the check returns without one: the document's children (the walk ends
    # with `children.each`). The walk reads the tree and yields only on a duplicate, so
    # that is what it would have done. Installed only where the checker's source is
    # SOURCE (rubocop 1.39's); the checker's module is watched as Psych's are.
    module DuplicateCheckHook
      SOURCE = <<~'RUBY'.gsub(/^(?=.)/, '    ')
        def self.check(yaml_string, filename, &on_duplicated)
          # Ruby 2.6+
          tree = if Gem::Version.new(Psych::VERSION) >= Gem::Version.new('3.1.0')
                   # Specify filename to display helpful message when it raises
                   # an error.
                   YAML.parse(yaml_string, filename: filename)
                 else
                   YAML.parse(yaml_string, filename)
                 end
          return unless tree

          traverse(tree, &on_duplicated)
        end

        def self.traverse(tree, &on_duplicated)
          case tree
          when Psych::Nodes::Mapping
            tree.children.each_slice(2).with_object([]) do |(key, value), keys|
              exist = keys.find { |key2| key2.value == key.value }
              yield(exist, key) if exist
              keys << key
              traverse(value, &on_duplicated)
            end
          else
            children = tree.children
            return unless children

            children.each { |c| traverse(c, &on_duplicated) }
          end
        end
      RUBY

      def check(yaml_string, filename, &on_duplicated)
        options = { filename: filename }
        unless yaml_string.is_a?(String) && Gem::Version.new(Psych::VERSION) >= Gem::Version.new('3.1.0')
          return super
        end

        if Memo.lookup(:duplicates, yaml_string, options)
          tree = YAML.parse(yaml_string, filename: filename)
          return tree ? tree.children : nil
        end
        return super unless Memo.recording

        found = false
        result = super(yaml_string, filename) do |*keys|
          found = true
          on_duplicated&.call(*keys)
        end
        Memo.record(:duplicates, yaml_string, options, found ? :found : :none)
        result
      end
    end

    # Psych's entry points, through the memo.
    module YamlHook
      def safe_load(yaml, *args, **options)
        return super if Memo.bypassed? || !args.empty? || !yaml.is_a?(String) || options[:freeze]

        found = Memo.lookup(:safe_load, yaml, options)
        return found unless found.nil?

        # Its own `parse` is not an ask of the program's.
        result = Memo.bypass { super }
        Memo.record(:safe_load, yaml, options, result)
        result
      end

      def parse(yaml, *args, **options)
        return super if Memo.bypassed? || !args.empty? || !yaml.is_a?(String)

        found = Memo.lookup(:parse, yaml, options)
        return found unless found.nil?

        result = super
        Memo.record(:parse, yaml, options, result)
        result
      end
    end

    # ERB's compiler, through the memo: the compiled source, its magic comment's encoding
    # and frozen-string flag, and the compiler's `content` left by the compilation.
    module ErbHook
      def compile(text)
        return super unless text.is_a?(String) && instance_of?(::ERB::Compiler) && singleton_methods.empty?

        settings = instance_variables.reject { |v| v == :@content }.to_h { |v| [v, instance_variable_get(v)] }
        found = Memo.lookup(:erb, text, settings)
        if found
          self.content = found[:content]
          return found[:out]
        end
        out = super
        Memo.record(:erb, text, settings, { out: out, content: content })
        out
      end
    end
  end
end
