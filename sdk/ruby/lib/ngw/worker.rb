# frozen_string_literal: true

require_relative 'wire'
require_relative 'channel'
require_relative 'sys'
require_relative 'zygote'
require_relative 'child'
require_relative 'spare'
require_relative 'profile'

module Ngw
  SDK_VERSION = 'ngw-ruby/0.1.0'

  # The worker: the zygote's loop. It sends the hello, answers pings, reads each session's
  # header, forks the session's child (no thread exists in the zygote, so the child is a
  # whole copy), and relays between ngd and the child until the child's status is known:
  # the client's descriptors taken (`t`) or, without them, the child's pipes relayed as
  # chunks; ngd's interrupts delivered as signals; the status sent as `X`.
  class Worker
    # Features this worker speaks (docs/ngw.md section 15); the hello lists those that
    # ngd offers.
    FEATURES = %w[fds signals notices stdin-window ctty].freeze
    # Features that need nothing from ngd.
    OWN_FEATURES = %w[interrupt fork].freeze
    KILL_GRACE = 2.0
    WINDOW = 256 * 1024
    OUT_HIGH = 1 << 20

    # One session's header: what ngd sent, decoded.
    Request = Struct.new(:args, :env, :dir, :command, :fds, :fd_map, :pty_map, :umask, :sigign,
                         :id, keyword_init: true)

    def self.main(argv)
      new(argv).run
    end

    def initialize(argv)
      @argv = argv
      @quit = false
      @retiring = false
    end

    def log(msg)
      $stderr.write("ngw-ruby[#{Process.pid}]: #{msg}\n")
      $stderr.flush
    end

    def usage_error(msg)
      warn "ngw-ruby: #{msg}"
      warn 'usage: ngw-ruby [--preload FEATURE]... [--state-dir DIR] [--no-learn] [--no-spare] ' \
           '[--rehearse NAME=ARGS]... [--no-rehearse] NAME=PROGRAM | NAME ...'
      exit 2
    end

    def parse_args
      preloads = []
      commands = []
      state = File.join(ENV['XDG_STATE_HOME'] || File.join(Dir.home, '.local/state'), 'ngw-ruby')
      @learn = true
      @spares = true
      @rehearse = true
      @rehearsal_args = {}
      args = @argv.dup
      until args.empty?
        a = args.shift
        case a
        when '--preload' then preloads << (args.shift or usage_error('--preload needs a feature'))
        when '--state-dir' then state = (args.shift or usage_error('--state-dir needs a directory'))
        when '--no-learn' then @learn = false
        when '--no-spare' then @spares = false
        when '--no-rehearse' then @rehearse = false
        when '--rehearse'
          spec = args.shift or usage_error('--rehearse needs NAME=ARGS')
          name, words = spec.split('=', 2)
          usage_error('--rehearse needs NAME=ARGS') if words.nil?
          @rehearsal_args[name] = words.split
        when /\A-/ then usage_error("unknown option #{a}")
        else commands << command_spec(a)
        end
      end
      [preloads, commands, state]
    end

    # `NAME=PROGRAM` (a bare program name is looked up on PATH) or `NAME`.
    def command_spec(spec)
      name, program = spec.split('=', 2)
      return Zygote::Command.new(name, nil) if program.nil?

      unless program.include?('/')
        found = ENV.fetch('PATH', '').split(':').map { |d| File.join(d, program) }
                   .find { |p| File.file?(p) }
        program = found || program
      end
      Zygote::Command.new(name, File.expand_path(program))
    end

    def run
      fd = ENV['NGW_FD']
      usage_error('NGW_FD is not set: ngw-ruby is started by ngd') unless fd
      if ENV['NGW_VERSION'] && ENV['NGW_VERSION'] != '1'
        usage_error("unsupported ngw protocol #{ENV['NGW_VERSION']}")
      end
      sock = Socket.for_fd(Integer(fd))
      sock.close_on_exec = true
      ENV.delete('NGW_FD')
      ENV.delete('NGW_VERSION')
      @chan = Channel.new(sock)
      @host = ENV.fetch('NGW_HOST_FEATURES', '').split(',')
      @anchor = ENV.delete('NGW_ANCHOR')
      @anchor = nil unless @anchor && File.executable?(@anchor)
      Profile.file = ENV.delete('NGW_RUBY_PROFILE')
      preloads, commands, state = parse_args
      Sys.prepare
      @zygote = Zygote.new(commands, state_dir: state, preloads: preloads,
                                     log: method(:log), rehearsals: rehearsals(commands))
      error = nil
      error = 'no command to serve' if commands.empty?
      begin
        @zygote.preload! unless error
      rescue ScriptError, StandardError => e
        log(e.full_message(highlight: false))
        error = "preload failed: #{e.class}: #{e.message}"
      end
      Child.install_filters
      Session::RequireHook.install if @learn
      if Thread.list.size > 1
        log("preloading started #{Thread.list.size - 1} thread(s); sessions are forked anyway")
      end
      @features = OWN_FEATURES + FEATURES.select { |f| @host.include?(f) }
      # A controlling terminal needs the client's descriptors and its signals.
      @features.delete('ctty') unless feature?('fds') && feature?('signals')
      unless error
        log("serving #{commands.map(&:name).join(', ')}; preloaded #{@zygote.preloaded.size} " \
            "feature(s), watching #{@zygote.watched_count} file(s), key #{@zygote.key_vars.join(' ')}")
      end
      hello(error)
      if error
        log("worker cannot start: #{error}")
        @chan.flush_all
        exit 78
      end
      @chan.flush_all
      rehearse
      @chld_r, @chld_w = IO.pipe
      Signal.trap('CHLD') { @chld_w.write_nonblock('.', exception: false) }
      idle_loop
      @spare&.discard
      @chan.flush_all
      exit 0
    end

    # After the hello: the rehearsals, then the heap settled, before the first fork. A
    # session that arrives meanwhile waits in the channel.
    def rehearse
      @zygote.rehearse!
      @zygote.settle_heap
      return unless Thread.list.size > 1

      log("the rehearsal left #{Thread.list.size - 1} thread(s); sessions are forked anyway")
    end

    # The rehearsals the zygote runs: `--rehearse NAME=ARGS` for program commands, and the
    # built-in ones (Rehearsal.builtin) for the others; none with `--no-rehearse`.
    def rehearsals(commands)
      return [] unless @rehearse

      commands.filter_map do |c|
        next if c.interpreter?

        args = @rehearsal_args[c.name]
        args ? Rehearsal.new(c, args, {}) : Rehearsal.builtin(c)
      end
    end

    def hello(error)
      h = { 'protocol' => 1, 'pid' => Process.pid }
      if error
        h['error'] = error
      else
        h['commands'] = @zygote.commands.map(&:name)
        h['features'] = @features
        h['max_chunk'] = Wire::MAX_CHUNK
        h['kill_grace_ms'] = (KILL_GRACE * 1000).to_i
        h['sdk'] = SDK_VERSION
        h['runtime'] = "#{RUBY_ENGINE} #{RUBY_VERSION}"
      end
      @chan.send_chunk('h', Wire.json(h))
    end

    def feature?(name)
      @features.include?(name)
    end

    # A notice to ngd, and the same line in the worker's log (its stderr): what ngd
    # does not take as notices is still told.
    def notice(kind, message, session = nil)
      log("#{kind}: #{message}#{session ? " (session #{session})" : ''}")
      return unless feature?('notices')

      n = { 'kind' => kind, 'message' => message }
      n['session'] = session.to_i if session
      @chan.send_chunk('n', Wire.json(n))
    end

    # Between sessions: pings, quit, a session's header; stray chunks are dropped.
    # Chunks that came in the same read as a header's end belong to its session: they
    # are put back for it.
    def idle_loop
      header = nil
      until @quit || @chan.eof?
        prepare_spare
        unless @chan.backlog?
          writers = @chan.pending_output.positive? ? [@chan.io] : nil
          ready = IO.select([@chan.io, @chld_r], writers)
          next unless ready

          @chan.flush_some if writers && ready[1].include?(@chan.io)
          @chld_r.read_nonblock(4096, exception: false) if ready[0].include?(@chld_r)
          next unless ready[0].include?(@chan.io)
        end

        chunks = @chan.read_chunks
        until chunks.empty?
          c = chunks.shift
          header = idle_chunk(header, c)
          next unless c.type == 'C' && header

          @chan.unread(chunks)
          chunks = []
          run_session(header)
          header = nil
        end
        reap_strays
        break if @retiring && header.nil?
      end
    end

    # One chunk while idle or in a header; returns the header being read, if any.
    def idle_chunk(header, chunk)
      if header
        header_chunk(header, chunk)
        return header
      end
      case chunk.type
      when 'p' then @chan.send_chunk('o', chunk.payload)
      when 'q' then @quit = true
      when 'A', 'E', 'D', 'C'
        header = { args: [], env: [], dir: nil, fds: [] }
        header_chunk(header, chunk)
        return header
      else
        chunk.fds.each(&:close)
      end
      nil
    end

    def header_chunk(header, chunk)
      header[:fds].concat(chunk.fds)
      case chunk.type
      when 'A' then header[:args] << chunk.payload
      when 'E' then header[:env] << chunk.payload
      when 'D' then header[:dir] = chunk.payload
      when 'C' then header[:command] = chunk.payload
      when 'p' then @chan.send_chunk('o', chunk.payload)
      when 'q' then @quit = true
      end
    end

    # Forks the spare the next session takes, unless there is one (or spares are off, or
    # the worker is leaving).
    def prepare_spare
      return if @spare || !@spares || @retiring || @quit || @chan.eof?

      @spare = Spare.fork_for(self, @ahead)
    end

    # The spare, for a session to take (nil if there is none).
    def take_spare
      spare = @spare
      @spare = nil
      spare
    end

    def reap_strays
      loop do
        pid = Process.waitpid(-1, Process::WNOHANG)
        break unless pid

        take_spare&.discard if @spare && pid == @spare.pid
      end
    rescue Errno::ECHILD
      nil
    end

    # The header as a Session: the command's environment (NGW_ and NAILGUN_ entries taken
    # out, malformed entries dropped, the last of repeated names kept), argv in the
    # locale's encoding as Ruby gives ARGV, the metadata.
    def decode(header)
      locale = Encoding.find('locale')
      env = {}
      meta = {}
      header[:env].each do |entry|
        name, value = entry.split('=', 2)
        next if value.nil? || name.empty? || entry.include?("\0")

        name = name.force_encoding(locale)
        value = value.force_encoding(locale)
        if name.start_with?('NGW_')
          meta[name] = value
        elsif !name.start_with?('NAILGUN_')
          env.delete(name)
          env[name] = value
        end
      end
      Request.new(
        args: header[:args].map { |a| a.force_encoding(locale) },
        env: env,
        dir: header[:dir]&.force_encoding(locale),
        command: header[:command].force_encoding(locale),
        fds: header[:fds],
        fd_map: meta['NGW_CLIENT_FDS'],
        pty_map: meta['NGW_CLIENT_PTY'],
        umask: meta['NGW_UMASK'] && Integer(meta['NGW_UMASK'], 8),
        sigign: meta.fetch('NGW_SIGIGN', '').split(',').map { |s| s.delete_prefix('SIG') }
                    .select { |s| Signal.list.key?(s) },
        id: meta['NGW_SESSION']
      )
    rescue ArgumentError
      Request.new(args: [], env: env || {}, dir: nil, command: header[:command].to_s,
                  fds: header[:fds], fd_map: nil, pty_map: nil, umask: nil, sigign: [], id: nil)
    end

    # The client's descriptors as {fd => IO}, when the map matches what arrived, and the
    # pseudo-terminal that came after them with its map ([IO, [fd...]]) or nil; else nil
    # (and they are closed).
    def client_fds(session)
      return nil if session.fds.empty?

      fds = fd_list(session.fd_map)
      pty = session.pty_map ? fd_list(session.pty_map) : []
      arrived = session.fds.dup
      slave = arrived.pop if !pty.empty? && arrived.size == fds.size + 1
      if feature?('fds') && !fds.empty? && fds.size == arrived.size && (pty - fds).empty?
        if slave && !feature?('ctty')
          slave.close
          slave = nil
        end
        return [fds.zip(arrived).to_h, slave && [slave, pty]]
      end

      session.fds.each(&:close)
      nil
    end

    # "0,1,2" as [0, 1, 2]: strictly increasing fds among 0-2, or [] if it is not.
    def fd_list(map)
      fds = map.to_s.split(',').map { |s| Integer(s, exception: false) }
      return [] unless fds.all? { |f| f&.between?(0, 2) } && fds.each_cons(2).all? { |a, b| a < b }

      fds
    end

    # One session, from its header to its `X`.
    def run_session(header)
      session = decode(header)
      command = @zygote.commands.find { |c| c.name == session.command }
      ios, pty = client_fds(session)
      if ios
        @chan.send_chunk('t', pty ? 'ctty' : '')
      elsif !session.fds.empty?
        @chan.send_chunk('t', 'relay')
      end
      unless command
        ios&.each_value(&:close)
        pty&.first&.close
        @chan.send_chunk('2', "ngw-ruby: unknown command #{session.command}\n")
        @chan.send_chunk('X', "127\n")
        return
      end
      cold = cold_reason(session, command, session_ttys(ios, pty))
      @ahead = ahead_for(session, command, cold)
      Ngw::Session.run(self, session, command, ios, cold, pty)
    end

    # What the next spare builds ahead for (Ahead): the directory and environment of a
    # warm session of rubocop, as its child sets them; nil when there is nothing to build.
    def ahead_for(session, command, cold)
      return nil if cold || command.interpreter? || session.dir.nil? || !Ahead.ready?
      return nil unless File.basename(command.program) == 'rubocop'

      env = session.env.dup
      @zygote.delta.each { |k, v| v.nil? ? env.delete(k) : env[k] = v }
      [session.dir, env]
    end

    # Which of the child's fds 0-2 will be terminals ({fd => true/false, nil when closed}):
    # the client's descriptors as they are, the pseudo-terminal on its fds, or pipes.
    def session_ttys(ios, pty)
      (0..2).to_h do |fd|
        answer = if pty && pty[1].include?(fd)
                   true
                 elsif ios
                   ios[fd] && !ios[fd].closed? ? ios[fd].tty? : nil
                 else
                   false
                 end
        [fd, answer]
      end
    end

    # Why this session must run the cold way (the real program, exec'd), or nil.
    def cold_reason(session, command, ttys)
      if @zygote.tainted
        unless @retiring
          notice('retire', 'the rehearsal left state it could not put back; a fresh worker does not rehearse',
                 session.id)
          @retiring = true
        end
        return @zygote.tainted
      end
      if (path = @zygote.changed_file)
        unless @retiring
          notice('stale', "#{path} changed since the zygote loaded it", session.id)
          notice('retire', 'code changed on disk; a fresh worker loads the new code', session.id)
          @retiring = true
        end
        return "#{path} changed since the zygote loaded it"
      end
      if (why = @zygote.key_mismatch(session.env, ttys))
        return why
      end
      return 'ruby options before the script' if command.interpreter? &&
                                                 (session.args.empty? || session.args[0].start_with?('-'))

      nil
    end

    attr_reader :chan, :chld_r, :chld_w, :zygote, :quit, :anchor
    attr_accessor :retiring

    def learn?
      @learn
    end

    def quit!
      @quit = true
    end
  end
end

require_relative 'session'
