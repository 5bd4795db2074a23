# frozen_string_literal: true

# A controlling terminal (ctty): the driver passes a pseudo-terminal's slave after the
# client's descriptors, as ngd does for our `ng` on a terminal; the worker answers
# `t ctty` and the child leads a session whose controlling terminal it is.
require 'minitest/autorun'
require 'pty'
require 'io/console'
require_relative 'driver'

class TestCtty < Minitest::Test
  SCRIPT = <<~RUBY
    File.open('/dev/tty', 'w') { |t| t.print "tty opens\\n" }
    p [Process.getsid == Process.pid, STDIN.tty?, STDOUT.tty?, STDERR.tty?, STDOUT.sync]
    $stdout.puts 'out'
    $stderr.puts 'err'
  RUBY

  def setup
    @dir = Dir.mktmpdir
    File.write(File.join(@dir, 'tty.rb'), SCRIPT)
  end

  def teardown
    @w&.close
    FileUtils.rm_rf(@dir)
  end

  def read_all(master)
    out = +''
    loop do
      break unless IO.select([master], nil, nil, 2)

      out << master.read_nonblock(4096)
    rescue EOFError, Errno::EIO
      break
    end
    out
  end

  def test_the_pty_becomes_the_controlling_terminal
    @w = NgwTest::Driver.new('ruby', host_features: 'fds,signals,notices,stdin-window,ctty')
    assert_includes @w.hello['features'], 'ctty'
    master, slave = PTY.open
    client = File.open(File::NULL, 'r+')
    res = @w.session('ruby', ['tty.rb'], dir: @dir, fds: { 0 => client, 1 => client, 2 => client },
                                         pty: [slave, '0,1,2'])
    slave.close
    client.close
    assert_equal 'ctty', res.taken
    text = read_all(master).delete("\r")
    assert_equal "0\n", res.exit, text + @w.log
    assert_equal "tty opens\n[true, true, true, true, false]\nout\nerr\n", text
  ensure
    master&.close
  end

  # A preload that asks whether stdout is a terminal (as reline and rainbow do when they
  # load) keeps the zygote's answer: a session whose stdout answers otherwise runs cold.
  def test_a_preload_that_asks_whether_stdout_is_a_terminal_is_in_the_key
    lib = File.join(@dir, 'ttylib.rb')
    File.write(lib, "TTYLIB = $stdout.tty?\n")
    File.write(File.join(@dir, 'show.rb'), "require #{lib.inspect}\np TTYLIB\n")
    @w = NgwTest::Driver.new('--no-learn', '--preload', lib, "show=#{File.join(@dir, 'show.rb')}",
                             host_features: 'fds,signals,notices,stdin-window,ctty')
    r, w = IO.pipe
    res = @w.session('show', [], dir: @dir, fds: { 1 => w, 2 => w })
    w.close
    assert_equal "false\n", r.read
    assert_empty res.notices
    r.close
    master, slave = PTY.open
    client = File.open(File::NULL, 'r+')
    res = @w.session('show', [], dir: @dir, fds: { 0 => client, 1 => client, 2 => client },
                                 pty: [slave, '0,1,2'])
    slave.close
    client.close
    assert_equal "true\n", read_all(master).delete("\r")
    assert_equal(['fallback'], res.notices.map { |n| n['kind'] })
    assert_match(/whether stdout is a terminal \(it was not\)/, res.notices[0]['message'])
  ensure
    master&.close
  end

  def test_without_ctty_the_slave_is_closed
    @w = NgwTest::Driver.new('ruby')
    refute_includes @w.hello['features'], 'ctty'
    master, slave = PTY.open
    r, w = IO.pipe
    res = @w.session('ruby', ['-e', 'p File.exist?("/dev/tty") && (File.open("/dev/tty") rescue :none)'],
                     dir: @dir, fds: { 1 => w, 2 => w }, pty: [slave, '1'])
    w.close
    assert_equal '', res.taken
    assert_equal ":none\n", r.read
    [r, slave, master].each(&:close)
  end
end
