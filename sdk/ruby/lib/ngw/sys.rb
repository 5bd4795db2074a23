# frozen_string_literal: true

module Ngw
  # The few system calls Ruby has no method for, through Fiddle (part of Ruby's standard
  # distribution), each a no-op when Fiddle or libc's symbol is unavailable:
  # prctl(PR_SET_PDEATHSIG), so that a session's child dies with the worker, and dup2, to
  # put a descriptor under a standard stream without changing the stream's IO object.
  module Sys
    PR_SET_PDEATHSIG = 1

    module_function

    # libc's function `name` with the given argument and return types, or nil.
    def libc_function(name, args, ret)
      Fiddle::Function.new(Fiddle::Handle::DEFAULT[name], args, ret)
    rescue LoadError, Fiddle::DLError
      nil
    end

    # Loads the functions once, in the zygote, so that children only call them.
    def prepare
      require 'fiddle'
      @prctl = libc_function('prctl', [Fiddle::TYPE_INT, Fiddle::TYPE_LONG, Fiddle::TYPE_LONG,
                                       Fiddle::TYPE_LONG, Fiddle::TYPE_LONG], Fiddle::TYPE_INT)
      @dup2 = libc_function('dup2', [Fiddle::TYPE_INT, Fiddle::TYPE_INT], Fiddle::TYPE_INT)
    rescue LoadError, NameError
      @prctl = nil
      @dup2 = nil
    end

    def dup2?
      !@dup2.nil?
    end

    # dup2(2); false when it is unavailable.
    def dup2(from, to)
      return false unless @dup2

      Fiddle.last_error = 0 if Fiddle.respond_to?(:last_error=)
      raise SystemCallError.new('dup2', Fiddle.last_error.to_i) if @dup2.call(from, to).negative?

      true
    end

    # The calling process gets `signal` when its parent dies.
    def parent_death_signal(signal)
      @prctl&.call(PR_SET_PDEATHSIG, Signal.list.fetch(signal), 0, 0, 0)
    end
  end
end
