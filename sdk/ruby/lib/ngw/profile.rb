# frozen_string_literal: true

module Ngw
  # Where a session's child spends its time, behind a debug switch: with
  # `NGW_RUBY_PROFILE=FILE` in the worker's environment, each session's child appends one
  # line to FILE when it exits (after the program's own `at_exit` hooks): the wall time of
  # its phases (from the start of the session in the child to the program's `<main>`, and
  # the program to its exit), its CPU time, its minor and major page faults
  # (`/proc/self/stat`), the collections it ran (minor/major, and why the last one ran),
  # the objects it allocated, the free heap slots and the malloc growth it started with,
  # and what code under test added with `Profile.add` and `Profile.note`. Off, it costs
  # one `nil` check per session.
  module Profile
    @file = nil
    @extra = {}
    @notes = {}

    class << self
      attr_accessor :file

      def on?
        !@file.nil?
      end

      # In the child: the session starts; the report is written at exit.
      def start
        return unless @file

        @extra = {}
        @notes = {}
        @t0 = now
        @cpu0 = cpu
        @faults0 = faults
        @gc0 = gc
        me = Process.pid
        at_exit { finish if Process.pid == me }
      end

      # In the child: the program's `<main>` starts.
      def main
        @t_main = now if @file
      end

      # Adds `millis` to the phase `name` of this session's report.
      def add(name, millis)
        @extra[name] = (@extra[name] || 0) + millis if @file
      end

      # Notes `text` as `name` in this session's report.
      def note(name, text)
        @notes[name] = text.to_s.tr(' ', '_') if @file
      end

      def now
        Process.clock_gettime(Process::CLOCK_MONOTONIC) * 1000
      end

      def cpu
        Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID) * 1000
      end

      # Minor and major page faults of this process so far.
      def faults
        fields = File.read('/proc/self/stat').split(') ', 2)[1].split
        [fields[7].to_i, fields[9].to_i]
      rescue SystemCallError, NoMethodError
        [0, 0]
      end

      def gc
        s = GC.stat
        [s[:minor_gc_count], s[:major_gc_count], s[:total_allocated_objects], s[:heap_free_slots],
         s[:malloc_increase_bytes]]
      end

      private

      def finish
        t = now
        f = faults
        g = gc
        phases = { setup: (@t_main || t) - @t0, program: t - (@t_main || t), cpu: cpu - @cpu0 }
        words = phases.merge(@extra).map { |k, v| format('%<k>s=%<v>.1f', k: k, v: v) }
        words += @notes.map { |k, v| "#{k}=#{v}" }
        words << "minflt=#{f[0] - @faults0[0]}" << "majflt=#{f[1] - @faults0[1]}"
        words << "gc=#{g[0] - @gc0[0]}/#{g[1] - @gc0[1]}" << "allocated=#{g[2] - @gc0[2]}"
        words << "free_slots=#{@gc0[3]}" << "malloc_increase=#{@gc0[4]}"
        words << "gc_by=#{GC.latest_gc_info(:gc_by)}" if g[0] + g[1] > @gc0[0] + @gc0[1]
        File.open(@file, 'a') { |io| io.write("#{Process.pid} #{words.join(' ')}\n") }
      rescue StandardError
        nil
      end
    end
  end
end
