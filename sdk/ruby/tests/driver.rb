# frozen_string_literal: true

# A driver that plays ngd's side of ngw against a real `ngw-ruby`: it spawns the worker on
# a socketpair (NGW_FD, NGW_HOST_FEATURES, its log in a file), reads the hello, and runs
# sessions: the header (with the client's descriptors in one SCM_RIGHTS message, as ngd
# sends them, or none), stdin answered as ngd answers `S`, interrupts, and everything the
# worker sends until `X`.
require 'socket'
require 'json'
require 'tmpdir'
require 'timeout'

module NgwTest
  BIN = File.expand_path('../bin/ngw-ruby', __dir__)

  # What a session showed: output, the exit payload, notices, the `t` answer, `z` stops.
  Result = Struct.new(:stdout, :stderr, :exit, :notices, :taken, :stops, keyword_init: true) do
    def code
      exit.to_i
    end
  end

  # One ngw-ruby worker under test.
  class Driver
    attr_reader :hello, :pid, :log_path, :notices

    def initialize(*args, host_features: 'fds,signals,notices,stdin-window', env: {},
                   state_dir: nil)
      @dir = Dir.mktmpdir('ngw-ruby-test')
      @log_path = File.join(@dir, 'worker.log')
      state_dir ||= File.join(@dir, 'state')
      ours, theirs = UNIXSocket.pair
      @sock = ours
      full_env = { 'NGW_FD' => theirs.fileno.to_s, 'NGW_VERSION' => '1',
                   'NGW_PLUGIN' => 'test', 'NGW_HOST_FEATURES' => host_features }.merge(env)
      @pid = Process.spawn(full_env, 'ruby', BIN, '--state-dir', state_dir, *args,
                           theirs => theirs, in: File::NULL, %i[out err] => [@log_path, 'a'],
                           pgroup: true)
      theirs.close
      @buf = +''.b
      @notices = []
      type, payload = read_chunk(timeout: 30)
      raise "first chunk #{type.inspect}: #{payload}" unless type == 'h'

      @hello = JSON.parse(payload)
    end

    def log
      File.read(@log_path)
    end

    def send_chunk(type, payload = '', fds: nil)
      data = [payload.bytesize].pack('N') + type + payload.b
      if fds
        @sock.sendmsg(data, 0, nil, Socket::AncillaryData.unix_rights(*fds))
      else
        @sock.write(data)
      end
    end

    def read_chunk(timeout: 20)
      loop do
        if @buf.bytesize >= 5
          len = @buf.unpack1('N')
          if @buf.bytesize >= 5 + len
            type = @buf[4]
            payload = @buf[5, len]
            @buf = @buf[(5 + len)..]
            return [type, payload]
          end
        end
        raise Timeout::Error, 'worker silent' unless IO.select([@sock], nil, nil, timeout)

        data = @sock.read_nonblock(1 << 16, exception: false)
        return [nil, nil] if data.nil?
        next if data == :wait_readable

        @buf << data
      end
    end

    # Runs one session; `fds` ({0 => io, ...}) are passed as the client's descriptors.
    # `stdin` (a string) answers the worker's `S`; `during` is called with the driver after
    # the header is sent and before output is read (to send interrupts).
    def session(command, args = [], env: ENV.to_h, dir: Dir.pwd, fds: nil, stdin: '',
                umask: '0022', extra: [], on_output: nil, fd_map: nil, pty: nil)
      chunks = args.map { |a| ['A', a] }
      chunks += env.map { |k, v| ['E', "#{k}=#{v}"] }
      chunks << ['E', "NGW_UMASK=#{umask}"] << ['E', 'NGW_SESSION=7']
      chunks += extra.map { |e| ['E', e] }
      chunks << ['E', "NGW_CLIENT_FDS=#{fd_map || fds.keys.sort.join(',')}"] if fds
      chunks << ['E', "NGW_CLIENT_PTY=#{pty[1]}"] if pty
      chunks << ['D', dir] if dir
      chunks << ['C', command]
      data = chunks.map { |t, p| [p.bytesize].pack('N') + t + p.b }.join
      if fds
        ios = fds.sort.map(&:last)
        ios << pty[0] if pty
        @sock.sendmsg(data, 0, nil, Socket::AncillaryData.unix_rights(*ios))
      else
        @sock.write(data)
      end
      collect(stdin: stdin, on_output: on_output)
    end

    # Writes bytes as they are on the channel.
    def raw_write(bytes)
      @sock.write(bytes)
    end

    # Everything the worker sends for the session under way, until its `X`.
    def collect(stdin: '', on_output: nil)
      stdin = stdin.b
      out = +''.b
      err = +''.b
      res = Result.new(notices: [], stops: [])
      loop do
        type, payload = read_chunk(timeout: 60)
        case type
        when nil then raise "worker closed the channel; log:\n#{log}"
        when '1' then out << payload
        when '2' then err << payload
        when 't' then res.taken = payload
        when 'z' then res.stops << payload
        when 'n'
          n = JSON.parse(payload)
          res.notices << n
          @notices << n
        when 'S'
          want = payload.empty? ? 2048 : payload.to_i
          if stdin.empty?
            send_chunk('.')
          else
            while want.positive? && !stdin.empty?
              piece = stdin.byteslice(0, [want, 65_536].min)
              stdin = stdin.byteslice(piece.bytesize..)
              want -= piece.bytesize
              send_chunk('0', piece)
            end
            send_chunk('.') if stdin.empty? && !payload.empty? && want.positive?
          end
        when 'X'
          res.exit = payload
          break
        else raise "unexpected chunk #{type}"
        end
        on_output&.call(self, type, payload)
      end
      res.stdout = out
      res.stderr = err
      res
    end

    def ping(payload = 'hi')
      send_chunk('p', payload)
      read_chunk
    end

    def close
      unless @sock.closed?
        begin
          send_chunk('q')
        rescue Errno::EPIPE
          nil
        end
        @sock.close
      end
      Timeout.timeout(10) { Process.wait(@pid) }
    rescue Errno::ECHILD
      nil
    rescue Timeout::Error
      Process.kill('KILL', -@pid)
      Process.wait(@pid)
    ensure
      FileUtils.rm_rf(@dir)
    end

    # The worker's exit status, once it exits on its own.
    def wait_exit(timeout = 10)
      Timeout.timeout(timeout) { Process.wait2(@pid)[1] }
    end

    # Closes ngd's end of the channel, as when ngd dies.
    def drop_channel
      @sock.close
    end
  end

  # A cold run: `argv` with `env`, in `dir`, stdin from `stdin` (string) or a file.
  # Waits for the worker's rehearsal, which runs after its hello: the worker answers a
  # ping once it is done.
  def self.rehearsed(worker)
    worker.send_chunk('p', 'rehearsed?')
    type, = worker.read_chunk(timeout: 180)
    raise "no pong: #{type.inspect}" unless type == 'o'
  end

  def self.cold(argv, env: ENV.to_h, dir: Dir.pwd, stdin: '')
    r_out, w_out = IO.pipe
    r_err, w_err = IO.pipe
    r_in, w_in = IO.pipe
    pid = Process.spawn(env, *argv, unsetenv_others: true, chdir: dir, in: r_in, out: w_out,
                                    err: w_err)
    [r_in, w_out, w_err].each(&:close)
    writer = Thread.new do
      w_in.write(stdin)
    rescue Errno::EPIPE
      nil
    ensure
      w_in.close
    end
    out_t = Thread.new { r_out.read }
    err = r_err.read
    out = out_t.value
    writer.join
    _, st = Process.wait2(pid)
    { stdout: out.b, stderr: err.b, status: st }
  end
end
