# frozen_string_literal: true

# The rehearsal: a zygote that runs a program's main once before its hello and puts back
# what the run changed. Ngw::World on its own (tests/fixtures/world_probe.rb); a program
# whose preloaded library keeps memos, a class variable, filled constants, a Struct, a
# global and $LOAD_PATH (tests/fixtures/rehearsal_lib.rb), rehearsed and then compared
# with cold runs byte for byte in two directories; rehearsals that change what cannot be
# put back (an `at_exit` hook, a method, a trap, a thread), left out by their trial; and
# rubocop's built-in rehearsal against cold runs where a memo would show (a project root,
# a target Ruby version, `--debug`).
require 'minitest/autorun'
require 'open3'
require_relative 'driver'

class TestWorld < Minitest::Test
  def test_state_put_back_and_what_cannot_be_named
    out, err, st = Open3.capture3(RbConfig.ruby, File.expand_path('fixtures/world_probe.rb', __dir__))
    assert st.success?, err
    assert_equal <<~OUT, out
      memo nil added false
      table {:a=>1} pair ["l", "r"] text text
      count 0 global :before bad []
      restored true
      method true
      nothing []
    OUT
  end
end

class TestRehearsal < Minitest::Test
  FIXTURES = File.expand_path('fixtures', __dir__)
  LIB = File.join(FIXTURES, 'rehearsal_lib.rb')
  PROG = File.join(FIXTURES, 'rehearsal_prog.rb')

  def setup
    @dir = Dir.mktmpdir
    @other = File.join(@dir, 'other')
    Dir.mkdir(@other)
    File.write(File.join(@other, 'sample.txt'), 'other')
    @state = File.join(@dir, '.state')
  end

  def teardown
    @w&.close
    FileUtils.rm_rf(@dir)
  end

  def env(extra = {})
    ENV.to_h.reject { |k, _| k.start_with?('NGW_') }.merge(extra)
  end

  def worker(rehearse, env: {})
    @w = NgwTest::Driver.new('--no-learn', '--preload', LIB, '--rehearse', "prog=#{rehearse}",
                             "prog=#{PROG}", state_dir: @state, env: env)
    NgwTest.rehearsed(@w)
  end

  def same_as_cold(args, dir, stdin: '', env: self.env)
    warm = @w.session('prog', args, env: env, dir: dir, stdin: stdin)
    cold = NgwTest.cold([RbConfig.ruby, PROG, *args], env: env, dir: dir, stdin: stdin)
    assert_equal [cold[:stdout], cold[:stderr], "#{cold[:status].exitstatus}\n"],
                 [warm.stdout, warm.stderr, warm.exit], "#{args} in #{dir}"
    assert_empty warm.notices
    warm
  end

  def test_a_rehearsed_zygote_serves_as_cold
    File.write(File.join(@dir, 'conf.yml'), "here: 1\n")
    File.write(File.join(@other, 'conf.yml'), "there: [2]\n")
    worker('first second')
    assert_match(/rehearsed prog first second \(exit 0\).* kept 4 result/, @w.log)
    res = same_as_cold(['one'], @dir, stdin: 'abc')
    assert_includes res.stdout, 'yaml {"a"=>1, "b"=>["x", "y", "z"], "c"=>{"d"=>"e"}, "f"=>{"d"=>"e"}} ' \
                                "shared true keys frozen true\nconf {\"here\"=>1}\n"
    same_as_cold(['again'], @dir)
    assert_includes res.stdout, "root #{@dir}\n"
    assert_includes res.stdout, "seen [\"one\"]\ncache {\"one\"=>1}\nruns 1 calls 1 global 1\n"
    assert_includes res.stdout, 'load path 1 stdin 3'
    res = same_as_cold(%w[two three], @other)
    assert_includes res.stdout, "root #{@other}\n"
    assert_includes res.stdout, "conf {\"there\"=>[2]}\n"
    same_as_cold(['exit3'], @other)
  end

  # What the rehearsal's YAML and ERB made is served for the same text and options only:
  # a shared configuration (ERB, a duplicate key, loaded twice a run as rubocop loads its
  # own) served from the memo, then changed (computed), then back (served again).
  def test_the_memo_serves_the_same_text_only
    conf = File.join(@dir, 'shared.yml')
    first = "<% if true %>a: 1\n<% end %>b:\n- <%= 1 + 1 %>\n- :sym\n- !ruby/regexp /x/\na: 3\n"
    File.write(conf, first)
    worker('first', env: { 'REHEARSAL_CONF' => conf })
    assert_match(/rehearsed prog first \(exit 0\).* kept 7 result/, @w.log)
    probe = File.join(@dir, 'probe')
    run = lambda do |dir|
      File.unlink(probe) if File.exist?(probe)
      res = same_as_cold(['one'], dir, env: env('REHEARSAL_CONF' => conf, 'MEMO_PROBE' => probe))
      [res.stdout, File.read(probe)]
    end
    out, hits = run.call(@dir)
    assert_includes out, %(dups ["a:5"] {"a"=>"changed", "b"=>[2, :sym, /x/]}\n)
    assert_equal '[[:erb, 4], [:parse, 4], [:safe_load, 3]]', hits
    File.write(conf, first.sub('a: 3', 'c: 3'))
    out, hits = run.call(@other)
    assert_includes out, %(dups [] {"a"=>"changed", "b"=>[2, :sym, /x/], "c"=>3}\n)
    assert_equal '[[:erb, 2], [:parse, 2], [:safe_load, 1]]', hits
    File.write(conf, first)
    assert_equal '[[:erb, 4], [:parse, 4], [:safe_load, 3]]', run.call(@other)[1]
    # A program that changes Psych or ERB before it loads computes for itself.
    File.unlink(probe)
    res = same_as_cold(['patch'], @dir, env: env('REHEARSAL_CONF' => conf, 'MEMO_PROBE' => probe))
    assert_includes res.stdout, %(dups ["A:5"] {"A"=>"changed", "bee"=>[2, :sym, /x/]}\n)
    assert_equal '[]', File.read(probe)
  end

  def test_an_exit_status_is_a_rehearsal_too
    worker('exit3')
    assert_match(/rehearsed prog exit3 \(exit 3\)/, @w.log)
    same_as_cold(['x'], @dir)
  end

  def test_what_cannot_be_put_back_keeps_the_rehearsal_out
    { 'atexit' => /at_exit hooks registered/, 'define' => /methods defined/,
      'trap' => /SIGUSR1 handler changed/, 'thread' => /thread\(s\) left running/ }.each do |what, why|
      worker(what)
      left_out = /rehearsal prog #{what} left out: its trial changed what cannot be put back: .*#{why.source}/
      assert_match(left_out, @w.log)
      refute_match(/rehearsed prog/, @w.log)
      same_as_cold([what], @dir)
      @w.close
      @w = nil
    end
  end
end

class TestRubocopRehearsal < Minitest::Test
  SOURCE = "def foo( a )\n  x = 1\n  return a\nend\nputs \"hi\"\n"

  def setup
    @dir = Dir.mktmpdir
    @state = File.join(@dir, '.state')
  end

  def teardown
    @w&.close
    FileUtils.rm_rf(@dir)
  end

  def env
    ENV.to_h.reject { |k, _| k.start_with?('NGW_') }
  end

  # Output with rubocop's timings taken out.
  def untimed(text)
    text.gsub(/\d+\.\d+ seconds/, 'N seconds')
  end

  def same_as_cold(args, dir, untime: false, extra: {})
    warm = @w.session('rubocop', args, env: env.merge(extra), dir: dir)
    cold = NgwTest.cold(['/usr/bin/rubocop', *args], env: env.merge(extra), dir: dir)
    fix = untime ? ->(s) { untimed(s) } : ->(s) { s }
    assert_equal [fix.call(cold[:stdout]), fix.call(cold[:stderr]), "#{cold[:status].exitstatus}\n"],
                 [fix.call(warm.stdout), fix.call(warm.stderr), warm.exit], "#{args} in #{dir}"
    assert_empty warm.notices
    warm
  end

  # Where rubocop memoises what depends on the directory (its project root, found by a
  # Gemfile; the default configuration's Exclude made absolute; the target Ruby version
  # from .ruby-version), a rehearsed zygote shows what a cold run shows.
  def test_rehearsed_rubocop_as_cold_in_two_projects
    plain = File.join(@dir, 'plain')
    project = File.join(@dir, 'project')
    [plain, project, File.join(project, 'vendor')].each do |d|
      FileUtils.mkdir_p(d)
      File.write(File.join(d, 't.rb'), SOURCE)
    end
    File.write(File.join(project, 'Gemfile'), "source 'https://rubygems.org'\n")
    File.write(File.join(project, '.ruby-version'), "2.7\n")
    File.write(File.join(project, 'u.rb'), "x = [1, 2].sum { _1 }\nputs x\n")
    @w = NgwTest::Driver.new('rubocop=/usr/bin/rubocop', state_dir: @state)
    first = @w.session('rubocop', %w[--cache false t.rb], env: env, dir: plain)
    assert_equal 'retire', first.notices.last&.fetch('kind')
    @w.wait_exit
    @w.close
    # Learning off: a project's target Ruby version loads a parser the first worker did
    # not, which would retire this one.
    @w = NgwTest::Driver.new('--no-learn', 'rubocop=/usr/bin/rubocop', state_dir: @state)
    NgwTest.rehearsed(@w)
    assert_match(/rehearsed rubocop --cache false rehearsal.rb \(exit 1\)/, @w.log)
    same_as_cold(%w[--cache false t.rb], plain)
    same_as_cold(%w[--cache false], project)
    same_as_cold(%w[--cache false u.rb], project)
    same_as_cold(%w[--cache false --format json], project)
    same_as_cold(%w[--cache false t.rb], plain)
    same_as_cold(%w[--cache false --debug t.rb], plain, untime: true)
    # What the rehearsal's run read (XDG_CONFIG_HOME, HOME) is not the zygote's key.
    same_as_cold(%w[--cache false t.rb], plain, extra: { 'XDG_CONFIG_HOME' => File.join(@dir, 'xdg') })
    erb_configuration(plain)
  end

  # A project configuration with ERB, changed between runs (the second time with a
  # duplicate key). Its ERB has what the worker's memos served written at exit (warm runs
  # only): rubocop's default configuration (ERB, YAML, its duplicate-key check) and the
  # binstub's gem resolution, from the rehearsal's; the second time, the default
  # configuration is the one the spare built ahead (Ngw::Ahead), the first session's
  # environment being the second's, and the session asks the memos nothing.
  def erb_configuration(dir)
    probe = File.join(@dir, 'probe')
    config = File.join(dir, '.rubocop.yml')
    write = lambda do |enabled|
      File.write(config, "<% if defined?(Ngw::Memo) && ENV['MEMO_PROBE'] %>" \
                         '<% hits = -> { [Ngw::Memo.hits.sort, Ngw::ResolveMemo.hits, ' \
                         'Ngw::Ahead.outcome] } %>' \
                         "<% at_exit { File.write(ENV['MEMO_PROBE'], hits.call.inspect) } %>" \
                         "<% end %>\n" \
                         "Layout/SpaceInsideParens:\n  Enabled: <%= #{enabled} ? 'true' : 'false' %>\n" \
                         "#{"Style/Not:\n  Enabled: true\n" * (enabled ? 2 : 1)}")
    end
    [false, true].each do |enabled|
      write.call(enabled)
      File.unlink(probe) if File.exist?(probe)
      res = same_as_cold(%w[--cache false t.rb], dir, extra: { 'MEMO_PROBE' => probe })
      assert_equal enabled, res.stdout.include?('SpaceInsideParens')
      # A duplicate key (the second time) is found, and warned of, as cold.
      assert_equal enabled, res.stderr.include?('`Style/Not` is concealed by line')
      memos = '\[\[\[:duplicates, 1\], \[:erb, [1-9]\], \[:parse, [1-9]\], \[:safe_load, [1-9]\]\], 1'
      # Served ahead, the default configuration's ERB, parse and duplicate-key check are
      # not the session's (rubocop's obsoletion rules, YAML too, still come from the memo).
      served = enabled ? /\A\[\[(\[:safe_load, [1-9]\])?\], 1, :served\]\z/ : /\A#{memos}, "env changed"\]\z/
      assert_match(served, File.read(probe))
    end
  end
end
