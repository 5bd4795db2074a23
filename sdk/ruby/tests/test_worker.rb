# frozen_string_literal: true

# The worker core against the driver: the hello, pings, and sessions of the fixture
# program compared with a cold `ruby` byte for byte (stdout, stderr, exit status), on
# relayed pipes and on the client's own descriptors; signals, stops, hangups, stdin.
require 'minitest/autorun'
require_relative 'driver'

FIXTURE = File.expand_path('fixtures/exact.rb', __dir__)

# Helpers shared by the test classes: a worker serving `ruby` and a scratch directory.
module WorkerHelpers
  def worker_args
    %w[ruby]
  end

  def setup
    @dir = Dir.mktmpdir
    @w = NgwTest::Driver.new(*worker_args)
  end

  def teardown
    @w.close
    FileUtils.rm_rf(@dir)
  end

  def env
    e = ENV.to_h.reject { |k, _| k.start_with?('NGW_') }
    e['EXACT_VAR'] = "caf\u00e9"
    e
  end

  def cold(args, stdin: '', merge: false)
    argv = ['ruby', *args]
    if merge
      r, w = IO.pipe
      pid = Process.spawn(env, *argv, unsetenv_others: true, chdir: @dir, in: File::NULL,
                                      out: w, err: w)
      w.close
      out = r.read
      _, st = Process.wait2(pid)
      return { stdout: out.b, stderr: ''.b, status: st }
    end
    NgwTest.cold(argv, env: env, dir: @dir, stdin: stdin)
  end

  def cold_exit(status)
    return "#{status.exitstatus}\n" unless status.signaled?

    "#{128 + status.termsig} SIG#{Signal.signame(status.termsig)}\n"
  end

  # A warm session on the client's descriptors: stdout and stderr on pipes (the same pipe
  # with `merge`), stdin from a pipe fed with `stdin`.
  def warm_fds(args, stdin: '', merge: false, **opts)
    in_r, in_w = IO.pipe
    out_r, out_w = IO.pipe
    err_r, err_w = merge ? [out_r, out_w] : IO.pipe
    feeder = Thread.new do
      in_w.write(stdin)
    rescue Errno::EPIPE
      nil
    ensure
      in_w.close
    end
    reader = Thread.new { out_r.read }
    err_reader = merge ? nil : Thread.new { err_r.read }
    res = @w.session('ruby', args, env: env, dir: @dir, fds: { 0 => in_r, 1 => out_w, 2 => err_w }, **opts)
    [in_r, out_w, err_w].uniq.each(&:close)
    res.stdout = reader.value.b
    res.stderr = err_reader ? err_reader.value.b : ''.b
    feeder.join
    res
  end

  def assert_as_cold(cold, warm)
    assert_equal cold[:stdout], warm.stdout, 'stdout'
    assert_equal cold[:stderr], warm.stderr, 'stderr'
    assert_equal cold_exit(cold[:status]), warm.exit, 'exit'
    assert_empty warm.notices.select { |n| n['kind'] == 'fallback' }, 'ran warm'
  end
end

class TestProtocol < Minitest::Test
  def setup
    @w = NgwTest::Driver.new('ruby', 'probe=/bin/true')
  end

  def teardown
    @w.close
  end

  def test_hello
    h = @w.hello
    assert_equal 1, h['protocol']
    assert_equal @w.pid, h['pid']
    assert_equal %w[ruby probe], h['commands']
    assert_equal %w[interrupt fork fds signals notices stdin-window].sort, h['features'].sort
    assert_equal 16 << 20, h['max_chunk']
    assert_match(/\Angw-ruby/, h['sdk'])
  end

  def test_ping_and_unknown_command
    assert_equal %w[o abc], @w.ping('abc')
    res = @w.session('nosuch', [])
    assert_equal "127\n", res.exit
    assert_match(/unknown command/, res.stderr)
    assert_equal %w[o x], @w.ping('x')
  end

  def test_quit_exits_zero
    @w.send_chunk('q')
    assert_equal 0, @w.wait_exit.exitstatus
  end
end

# Relayed sessions, each child forked when its session starts (no spare).
class TestRelayed < Minitest::Test
  include WorkerHelpers

  def worker_args
    %w[--no-spare ruby]
  end

  def warm(args, stdin: '')
    @w.session('ruby', args, env: env, dir: @dir, stdin: stdin)
  end

  %w[info interleave fork atexit raise kill caller data].each do |mode|
    define_method("test_#{mode}_as_cold") do
      assert_as_cold cold([FIXTURE, mode]), warm([FIXTURE, mode])
    end
  end

  def test_relative_script_and_exit_codes
    FileUtils.cp(FIXTURE, File.join(@dir, 'x.rb'))
    assert_as_cold cold(%w[x.rb info]), warm(%w[x.rb info])
    [0, 3, 255, 256].each do |n|
      assert_as_cold cold(['x.rb', 'exit', n.to_s]), warm(['x.rb', 'exit', n.to_s])
    end
  end

  def test_large_stdin
    data = (1..120_000).map { |i| "line #{i}\n" }.join
    assert_operator data.bytesize, :>, 1 << 20
    assert_as_cold cold([FIXTURE, 'stdin'], stdin: data), warm([FIXTURE, 'stdin'], stdin: data)
  end

  def test_umask_and_directory
    res = @w.session('ruby', [FIXTURE, 'info'], env: env, dir: @dir, umask: '0077')
    assert_includes res.stdout.force_encoding('UTF-8'), "[\"#{@dir}\", \"0077\", \"caf\u00e9\", false, []]"
  end

  def test_missing_directory_is_126
    res = @w.session('ruby', [FIXTURE, 'info'], env: env, dir: '/nonexistent/dir')
    assert_equal "126\n", res.exit
    assert_match(/ngw: cannot start ruby/, res.stderr)
  end

  def test_options_run_cold_with_a_notice
    res = warm(['-e', 'puts 6 * 7'])
    assert_equal "42\n", res.stdout
    assert_equal 'fallback', res.notices.first['kind']
  end

  def test_key_variable_runs_cold
    e = env.merge('RUBYOPT' => '-W0')
    res = @w.session('ruby', [FIXTURE, 'exit', '4'], env: e, dir: @dir)
    assert_equal "4\n", res.exit
    assert_match(/RUBYOPT differs/, res.notices.first['message'])
  end

  def test_interrupt_reaches_the_trap
    sent = false
    res = @w.session('ruby', [FIXTURE, 'trap'], env: env, dir: @dir, on_output: lambda { |d, type, payload|
      if type == '1' && payload.include?('ready') && !sent
        sent = true
        d.send_chunk('i', 'SIGINT')
      end
    })
    assert_equal "ready\ngot INT\n", res.stdout
    assert_equal "42\n", res.exit
  end

  # An interrupt in the same read as the header's end is the session's, not dropped.
  def test_interrupt_right_after_the_header
    header = [['A', FIXTURE], %w[A sleep], ['E', 'NGW_SESSION=9'], ['D', @dir], %w[C ruby],
              %w[i SIGTERM]]
    @w.send_chunk('p', 'x') # a ping first: the worker is idle and reading
    assert_equal %w[o x], @w.read_chunk
    @w.raw_write(header.map { |t, p| [p.bytesize].pack('N') + t + p }.join)
    res = @w.collect
    assert_equal "143 SIGTERM\n", res.exit
  end

  def test_hangup_ends_the_session
    sent = false
    res = @w.session('ruby', [FIXTURE, 'sleep'], env: env, dir: @dir, on_output: lambda { |d, type, _|
      if type == '1' && !sent
        sent = true
        d.send_chunk('i', 'hangup')
      end
    })
    assert_equal "129 SIGHUP\n", res.exit
    assert_equal %w[o after], @w.ping('after')
  end

  def test_stop_is_reported
    stopped = false
    res = @w.session('ruby', ['-e', '$stdout.sync = true; puts 1; Process.kill(:STOP, $$); puts 2'],
                     env: env, dir: @dir, on_output: lambda { |d, type, _|
                       if type == 'z' && !stopped
                         stopped = true
                         d.send_chunk('i', 'SIGCONT')
                       end
                     })
    assert_equal ['SIGSTOP'], res.stops
    assert_equal "1\n2\n", res.stdout
  end
end

# Sessions on the client's descriptors, each taken by the spare forked ahead of it.
class TestClientDescriptors < Minitest::Test
  include WorkerHelpers

  # The worker's children that are not sessions' (its spare).
  def children
    Dir.glob('/proc/[0-9]*/stat').filter_map do |f|
      fields = File.read(f).split(') ').last.split
      File.basename(File.dirname(f)).to_i if fields[1].to_i == @w.pid
    rescue SystemCallError
      nil
    end
  end

  def wait_for_spare(not_pid = nil)
    Timeout.timeout(10) do
      loop do
        found = children - [not_pid]
        return found.first unless found.empty?

        sleep 0.02
      end
    end
  end

  def test_the_spare_takes_the_next_session
    spare = wait_for_spare
    res = warm_fds(['-e', 'puts $$'])
    assert_equal "#{spare}\n", res.stdout
    second = wait_for_spare(spare)
    refute_equal spare, second
    Process.kill('KILL', second)
    sleep 0.1
    assert_as_cold cold([FIXTURE, 'exit', '3']), warm_fds([FIXTURE, 'exit', '3'])
  end

  %w[info interleave fork atexit raise kill caller data].each do |mode|
    define_method("test_#{mode}_as_cold") do
      warm = warm_fds([FIXTURE, mode])
      assert_equal '', warm.taken
      assert_as_cold cold([FIXTURE, mode]), warm
    end
  end

  def test_two_to_one_interleaving
    assert_as_cold cold([FIXTURE, 'interleave'], merge: true), warm_fds([FIXTURE, 'interleave'], merge: true)
  end

  # A write to a pipe whose reader is gone kills the program with SIGPIPE, silently, as
  # cold (`ruby prog | head`), rather than raising Errno::EPIPE.
  def test_closed_pipe_is_sigpipe
    r, w = IO.pipe
    err_r, err_w = IO.pipe
    reader = Thread.new do
      r.read(10)
      r.close
    end
    res = @w.session('ruby', [FIXTURE, 'yes'], env: env, dir: @dir, fds: { 1 => w, 2 => err_w })
    [w, err_w].each(&:close)
    reader.join
    assert_equal "141 SIGPIPE\n", res.exit
    assert_equal '', err_r.read
    err_r.close
  end

  def test_large_stdin_on_the_clients_pipe
    data = 'x' * (3 << 20)
    assert_as_cold cold([FIXTURE, 'stdin'], stdin: data), warm_fds([FIXTURE, 'stdin'], stdin: data)
  end

  def test_a_mismatched_map_is_relayed
    r, w = IO.pipe
    res = @w.session('ruby', [FIXTURE, 'exit', '0'], env: env, dir: @dir, fds: { 1 => w, 2 => w },
                                                     fd_map: '1')
    assert_equal 'relay', res.taken
    assert_equal "exiting\n", res.stdout
    [r, w].each(&:close)
  end

  def test_ignored_signals_and_process_signal
    res = warm_fds(['-e', 'p Signal.trap(:INT, "DEFAULT")'], extra: ['NGW_SIGIGN=SIGINT'])
    # run cold (options): the real ruby inherits nothing ignored from the worker
    assert_equal "0\n", res.exit
    script = File.join(@dir, 's.rb')
    File.write(script, "p Signal.trap(:INT, 'DEFAULT')\n")
    res = warm_fds([script], extra: ['NGW_SIGIGN=SIGINT'])
    assert_equal "\"IGNORE\"\n", res.stdout
  end

  def test_the_child_dies_with_the_channel
    r, w = IO.pipe
    in_r, in_w = IO.pipe
    @w.send_chunk('E', 'NGW_CLIENT_FDS=0,1,2', fds: [in_r, w, w])
    @w.send_chunk('A', FIXTURE)
    @w.send_chunk('A', 'sleep')
    @w.send_chunk('C', 'ruby')
    [in_r, w].each(&:close)
    line = r.gets
    pid = Integer(line[/\d+/])
    @w.drop_channel
    assert_equal 0, @w.wait_exit.exitstatus
    Timeout.timeout(5) do
      sleep 0.05 while (Process.kill(0, pid) rescue false) # rubocop:disable Style/RescueModifier
    end
    [r, in_w].each(&:close)
  end
end
