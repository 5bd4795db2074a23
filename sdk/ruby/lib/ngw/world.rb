# frozen_string_literal: true

module Ngw
  # What a Ruby process's code can see of its own state, recorded so that it can be put
  # back: global variables, every module's instance variables, class variables and
  # constants, and the mutable objects reachable from them (a Hash's entries, an Array's
  # elements, a String's bytes, an object's instance variables), a few levels deep. The
  # rehearsal (Rehearsal) records it before it runs a program's main in the zygote, and
  # afterwards restores what changed and names what it cannot restore.
  class World
    # How far from a module's state (or a global) objects are recorded.
    DEPTH = 4
    # At most this many objects are recorded; a world larger than that is not restored.
    MAX_OBJECTS = 400_000
    # Globals that are per frame or per thread, or read-only, or the interpreter's own.
    SKIP_GLOBALS = %i[$~ $_ $! $@ $? $$ $& $` $' $+ $1 $2 $3 $4 $5 $6 $7 $8 $9 $DEBUG $-d
                      $VERBOSE $-v $-w $FILENAME $* $-0 $-F $-I $-W $-a $-i $-l $-p].freeze
    # Objects whose state is not plain Ruby data: they are recorded by identity only.
    OPAQUE = [Module, Proc, Method, UnboundMethod, IO, Thread, Binding, Thread::Mutex,
              Thread::Queue, ObjectSpace::WeakMap, Random, Encoding, Regexp, Range,
              Numeric, Symbol, TrueClass, FalseClass, NilClass, Exception].freeze

    # Stands for a constant not loaded yet (autoload), or that cannot be read: not read, so
    # as not to load it.
    AUTOLOAD = Object.new.freeze

    # One recorded object: its identity and a copy of its contents.
    Shape = Struct.new(:object, :kind, :contents, :frozen)

    attr_reader :truncated

    # Records the world now.
    def initialize
      @globals = {}
      (global_variables - SKIP_GLOBALS).each do |g|
        @globals[g] = global_get(g)
      rescue StandardError
        nil
      end
      @locals = Thread.current.keys.to_h { |k| [k, Thread.current[k]] }
      @thread_vars = Thread.current.thread_variables.to_h { |k| [k, Thread.current.thread_variable_get(k)] }
      @modules = {}
      ObjectSpace.each_object(Module) do |m|
        next if m.singleton_class? || ours?(m)

        @modules[m] = module_state(m)
      rescue StandardError
        nil
      end
      @shapes = {}.compare_by_identity
      # $LOADED_FEATURES grows with what the run loaded, which stays loaded.
      @shapes[$LOADED_FEATURES] = nil
      @truncated = false
      record_reachable
    end

    # Whether `mod` existed when the world was recorded.
    def known?(mod)
      @modules.key?(mod)
    end

    # Puts back what changed since the record, and returns [restored, unrestorable]: a
    # description of each change put back, and of each change that cannot be. Methods
    # that the files in `loaded` (loaded since the record) define are what loading them
    # did, as a preload's would, and are not changes.
    def restore!(loaded: [])
      @loaded = loaded.to_h { |f| [f, true] }
      @extension_loaded = loaded.any? { |f| f.end_with?('.so') && !f.include?('/enc/') }
      restored = []
      bad = []
      @globals.each do |g, v|
        now = global_get(g)
        next if now.equal?(v)

        global_set(g, v) ? restored << "global #{g}" : bad << "global #{g} changed"
      end
      # A global the run created goes back to nil, what an unset global reads as.
      (global_variables - @globals.keys - SKIP_GLOBALS).each do |g|
        next if global_get(g).nil?

        global_set(g, nil) ? restored << "global #{g} (added)" : bad << "global #{g} added"
      rescue StandardError
        bad << "global #{g} added"
      end
      restore_thread(restored)
      @modules.each { |m, state| restore_module(m, state, restored, bad) }
      @shapes.each_value { |s| restore_shape(s, restored, bad) if s }
      [restored, bad]
    end

    # The main thread's fiber-local and thread variables, as they were.
    def restore_thread(restored)
      t = Thread.current
      t.keys.each do |k| # rubocop:disable Style/HashEachMethods (a Thread, not a Hash)
        next if @locals.key?(k) && t[k].equal?(@locals[k])

        t[k] = @locals[k]
        restored << "Thread.current[#{k.inspect}]"
      end
      t.thread_variables.each do |k|
        next if @thread_vars.key?(k) && t.thread_variable_get(k).equal?(@thread_vars[k])

        t.thread_variable_set(k, @thread_vars[k])
        restored << "thread variable #{k.inspect}"
      end
    end

    # Modules defined since the record that code can reach by name, and constants added
    # to existing modules.
    def new_constants
      added = []
      @modules.each do |m, state|
        (constants_of(m) - state[:constants].keys).each { |c| added << "#{m}::#{c}" }
      end
      added
    end

    private

    # The worker's own modules: its bookkeeping is not the program's state.
    def ours?(mod)
      name = mod.name
      name && (name == 'Ngw' || name.start_with?('Ngw::'))
    rescue StandardError
      false
    end

    # A global's value by its name (Ruby has no method for it).
    def global_get(name)
      binding.eval(name.to_s) # rubocop:disable Security/Eval
    end

    def global_set(name, value)
      b = binding
      b.local_variable_set(:value, value)
      b.eval("#{name} = value")
      true
    rescue NameError, SyntaxError, TypeError, ArgumentError, SecurityError
      false
    end

    def constants_of(mod)
      mod.constants(false)
    rescue StandardError
      []
    end

    def module_state(mod)
      ivars = mod.instance_variables.to_h { |v| [v, mod.instance_variable_get(v)] }
      cvars = begin
        mod.class_variables(false).to_h { |v| [v, mod.class_variable_get(v)] }
      rescue StandardError
        {}
      end
      consts = {}
      constants_of(mod).each do |c|
        consts[c] = mod.autoload?(c) ? AUTOLOAD : mod.const_get(c, false)
      rescue StandardError, LoadError
        # An autoload whose file is loaded but defines something else: named, not read.
        consts[c] = AUTOLOAD
      end
      { ivars: ivars, cvars: cvars, constants: consts, methods: method_names(mod) }
    end

    # The names of the methods `mod` defines ([instance, singleton]).
    def method_names(mod)
      [mod.instance_methods(false) + mod.private_instance_methods(false),
       mod.singleton_class.instance_methods(false) + mod.singleton_class.private_instance_methods(false)]
    rescue StandardError
      [[], []]
    end

    # The methods `mod` defines now that it did not, except those the files loaded since
    # define (by their source file; a C method when an extension was loaded).
    def new_methods(mod, was)
      now = method_names(mod)
      added = []
      [[mod, 0], [mod.singleton_class, 1]].each do |owner, i|
        (now[i] - was[i]).each do |name|
          file = owner.instance_method(name).source_location&.first
          next if file ? @loaded.include?(file) : @extension_loaded

          added << name
        end
      end
      added + (was[0] - now[0]) + (was[1] - now[1])
    rescue StandardError => e
      [e.class]
    end

    # The mutable objects reachable from the globals and the modules' state, breadth first.
    def record_reachable
      level = []
      @globals.each_value { |v| level << v }
      level.concat(@locals.values, @thread_vars.values)
      @modules.each_value do |st|
        level.concat(st[:ivars].values, st[:cvars].values)
        st[:constants].each_value { |v| level << v unless v.equal?(AUTOLOAD) }
      end
      DEPTH.times do
        following = []
        level.each do |obj|
          next if @shapes.key?(obj) || immutable?(obj)

          if @shapes.size >= MAX_OBJECTS
            @truncated = true
            break
          end
          shape = shape_of(obj)
          next unless shape

          @shapes[obj] = shape
          children(shape, following)
        end
        break if @truncated

        level = following
      end
    end

    def immutable?(obj)
      (obj.is_a?(String) && obj.frozen?) || OPAQUE.any? { |k| k === obj } # rubocop:disable Style/CaseEquality
    end

    def shape_of(obj)
      case obj
      when Struct then Shape.new(obj, :struct, obj.to_a, obj.frozen?)
      when Hash
        Shape.new(obj, :hash, [obj.to_a, obj.default_proc, obj.compare_by_identity?], obj.frozen?)
      when Array then Shape.new(obj, :array, obj.dup, obj.frozen?)
      when String then Shape.new(obj, :string, obj.frozen? ? nil : obj.b, obj.frozen?)
      else
        ivars = obj.instance_variables.to_h { |v| [v, obj.instance_variable_get(v)] }
        Shape.new(obj, :object, ivars, obj.frozen?)
      end
    rescue StandardError
      nil
    end

    def children(shape, into)
      case shape.kind
      when :hash then shape.contents[0].each { |k, v| into << k << v }
      when :array, :struct then into.concat(shape.contents)
      when :object then into.concat(shape.contents.values)
      end
    end

    def restore_module(mod, state, restored, bad)
      restore_ivars(mod, state[:ivars], mod.to_s, restored, bad)
      begin
        now = mod.class_variables(false)
      rescue StandardError
        now = []
      end
      now.each do |v|
        if state[:cvars].key?(v)
          next if mod.class_variable_get(v).equal?(state[:cvars][v])

          mod.class_variable_set(v, state[:cvars][v]) # rubocop:disable Style/ClassVars
          restored << "#{mod}.#{v}"
        else
          mod.remove_class_variable(v)
          restored << "#{mod}.#{v} (added)"
        end
      rescue StandardError => e
        bad << "#{mod}.#{v}: #{e.class}"
      end
      state[:constants].each do |c, v|
        next if v.equal?(AUTOLOAD)

        now = mod.const_get(c, false)
        bad << "#{mod}::#{c} reassigned" unless now.equal?(v)
      rescue StandardError, LoadError
        bad << "#{mod}::#{c} removed"
      end
      return if method_names(mod) == state[:methods]

      changed = new_methods(mod, state[:methods])
      bad << "#{mod}: methods defined or removed (#{changed.first(3).join(' ')})" unless changed.empty?
    end

    def restore_ivars(obj, saved, label, restored, bad)
      obj.instance_variables.each do |v|
        if saved.key?(v)
          next if obj.instance_variable_get(v).equal?(saved[v])

          obj.instance_variable_set(v, saved[v])
          restored << "#{label}.#{v}"
        else
          obj.remove_instance_variable(v)
          restored << "#{label}.#{v} (added)"
        end
      rescue StandardError => e
        bad << "#{label}.#{v}: #{e.class}"
      end
      saved.each do |v, val|
        next if obj.instance_variable_defined?(v)

        obj.instance_variable_set(v, val)
        restored << "#{label}.#{v} (removed)"
      rescue StandardError => e
        bad << "#{label}.#{v}: #{e.class}"
      end
    end

    def restore_shape(shape, restored, bad)
      obj = shape.object
      if obj.frozen? != shape.frozen
        bad << "#{obj.class} #{obj.__id__} was frozen"
        return
      end
      case shape.kind
      when :hash then restore_hash(obj, shape, restored, bad)
      when :array
        return if same_elements?(obj, shape.contents)

        obj.replace(shape.contents)
        restored << "an Array (#{obj.size})"
      when :struct
        return if same_elements?(obj.to_a, shape.contents)

        shape.contents.each_with_index { |e, i| obj[i] = e }
        restored << "a #{obj.class}"
      when :string
        return if shape.frozen || obj.b == shape.contents

        obj.replace(shape.contents.dup.force_encoding(obj.encoding))
        restored << 'a String'
      when :object
        restore_ivars(obj, shape.contents, "a #{obj.class}", restored, bad) unless shape.frozen
      end
    rescue StandardError => e
      bad << "#{obj.class}: #{e.class}: #{e.message}"
    end

    def same_elements?(now, was)
      now.size == was.size && now.each_with_index.all? { |e, i| e.equal?(was[i]) }
    end

    def restore_hash(hash, shape, restored, bad)
      pairs, default_proc, by_identity = shape.contents
      if hash.compare_by_identity? != by_identity
        bad << 'a Hash now compares by identity'
        return
      end
      now = hash.to_a
      same = now.size == pairs.size &&
             now.each_with_index.all? { |(k, v), i| k.equal?(pairs[i][0]) && v.equal?(pairs[i][1]) }
      return if same && hash.default_proc.equal?(default_proc)
      return if shape.frozen

      hash.clear
      pairs.each { |k, v| hash.store(k, v) }
      hash.default_proc = default_proc if default_proc && !hash.default_proc.equal?(default_proc)
      restored << "a Hash (#{pairs.size})"
    end
  end
end
