# frozen_string_literal: true

module Ngw
  # What `Psych.safe_load` made of the YAML texts the rehearsal loaded, kept as Marshal
  # dumps: a session that loads the same text with the same options gets a fresh copy of
  # the same result instead of loading it again (rubocop loads its 5,400-line default
  # configuration twice a run: 42 ms each, a copy 4 ms). Loading is a function of the text
  # and the options, so the copy is what the load would have made: the same classes,
  # values, encodings, shared references (YAML aliases) and frozen hash keys. Only results
  # of plain data are kept (Hash, Array, String, Symbol, numbers, true, false, nil,
  # Regexp), never with `freeze: true`, never for an IO, never an error, and at most
  # MAX_BYTES of text in all. (`Psych.parse` is not kept: copying its node tree costs
  # more than parsing again.)
  module YamlMemo
    MAX_BYTES = 8 << 20
    PLAIN = [String, Symbol, Integer, Float, TrueClass, FalseClass, NilClass, Regexp].freeze

    @entries = {}
    @bytes = 0
    @recording = false
    @serving = false

    class << self
      attr_accessor :recording, :serving

      def size
        @entries.size
      end

      # Makes Psych's `safe_load` go through the memo (once).
      def install
        return false unless defined?(::Psych) && ::Psych.respond_to?(:safe_load)

        ::Psych.singleton_class.prepend(Hook) unless ::Psych.singleton_class < Hook
        true
      end

      def key(kind, text, options)
        [kind, text.encoding, text, options]
      end

      # A copy of what parsing `text` with `options` made, or nil.
      def lookup(kind, text, options)
        return nil unless @serving && !@recording

        dump = @entries[key(kind, text, options)]
        dump && Marshal.load(dump) # rubocop:disable Security/MarshalLoad
      end

      def record(kind, text, options, result)
        return unless @recording && @bytes + text.bytesize <= MAX_BYTES
        return unless plain?(result, false)

        k = key(kind, text.dup.freeze, options.transform_values { |v| v.dup.freeze })
        return if @entries.key?(k)

        @entries[k] = Marshal.dump(result)
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
    end

    # Psych's entry points, through the memo.
    module Hook
      def safe_load(yaml, *args, **options)
        return super unless args.empty? && yaml.is_a?(String) && !options[:freeze]

        found = YamlMemo.lookup(:safe_load, yaml, options)
        return found unless found.nil?

        result = super
        YamlMemo.record(:safe_load, yaml, options, result)
        result
      end
    end
  end
end
