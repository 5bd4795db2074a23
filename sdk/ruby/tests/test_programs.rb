# frozen_string_literal: true

# Console programs through the worker: RubyGems binstubs (Debian's /usr/bin/rubocop and
# /usr/bin/rake) compared with cold runs byte for byte, first as the worker learns what
# they require and then from a zygote that preloaded it; the zygote's key (a variable read
# while preloading); stale code (a preloaded file changed).
require 'minitest/autorun'
require_relative 'driver'

# Shared: a scratch directory and a state directory per test.
module ProgramHelpers
  def setup
    @dir = Dir.mktmpdir
    @state = File.join(@dir, '.state')
  end

  def teardown
    @w&.close
    FileUtils.rm_rf(@dir)
  end

  def env(extra = {})
    ENV.to_h.reject { |k, _| k.start_with?('NGW_') }.merge(extra)
  end

  def assert_same_as_cold(command, program, args, env: self.env, dir: @dir)
    warm = @w.session(command, args, env: env, dir: dir)
    cold = NgwTest.cold([program, *args], env: env, dir: dir)
    assert_equal cold[:stdout], warm.stdout, "stdout of #{args}"
    assert_equal cold[:stderr], warm.stderr, "stderr of #{args}"
    assert_equal "#{cold[:status].exitstatus}\n", warm.exit, "exit of #{args}"
    warm
  end

  # A worker for `spec`; after a first session that learned preloads (and retired the
  # worker), a fresh worker that preloads them.
  def learned_worker(spec, command, args)
    @w = NgwTest::Driver.new(spec, state_dir: @state)
    first = @w.session(command, args, env: env, dir: @dir)
    assert_equal 'retire', first.notices.last&.fetch('kind')
    assert_equal 0, @w.wait_exit.exitstatus
    @w.close
    @w = NgwTest::Driver.new(spec, state_dir: @state)
    assert_match(/preloaded [1-9]\d* feature/, @w.log)
  end
end

class TestRubocop < Minitest::Test
  include ProgramHelpers

  def test_offences_and_json_as_cold
    File.write(File.join(@dir, 't.rb'), "def foo( a )\n  x = 1\n  return a\nend\nputs \"hi\"\n")
    learned_worker('rubocop=/usr/bin/rubocop', 'rubocop', ['--cache', 'false', 't.rb'])
    res = assert_same_as_cold('rubocop', '/usr/bin/rubocop', ['--cache', 'false', 't.rb'])
    assert_empty res.notices
    assert_equal "1\n", res.exit
    assert_includes res.stdout, 'offenses detected'
    assert_same_as_cold('rubocop', '/usr/bin/rubocop', ['--cache', 'false', '-f', 'json', 't.rb'])
    File.write(File.join(@dir, 't.rb'), "# frozen_string_literal: true\n\nputs 'hi'\n")
    res = assert_same_as_cold('rubocop', '/usr/bin/rubocop', ['--cache', 'false', 't.rb'])
    assert_equal "0\n", res.exit
    assert_same_as_cold('rubocop', '/usr/bin/rubocop', ['--no-such-option'])
    stdin_autocorrect_parallel
    configuration_changes
  end

  # A `.rubocop.yml` changed between runs, then a file it inherits from: each run sees the
  # configuration as it is (the child reads it, as a cold run does).
  def configuration_changes
    File.write(File.join(@dir, 't.rb'), "def foo( a )\n  x = 1\n  return a\nend\n")
    args = ['--cache', 'false', 't.rb']
    File.write(File.join(@dir, '.rubocop.yml'), "Style/FrozenStringLiteralComment:\n  Enabled: false\n")
    first = assert_same_as_cold('rubocop', '/usr/bin/rubocop', args)
    File.write(File.join(@dir, 'base.yml'), "Layout/SpaceInsideParens:\n  Enabled: false\n")
    File.write(File.join(@dir, '.rubocop.yml'), "inherit_from: base.yml\n")
    second = assert_same_as_cold('rubocop', '/usr/bin/rubocop', args)
    File.write(File.join(@dir, 'base.yml'), "Lint/UselessAssignment:\n  Enabled: false\n")
    third = assert_same_as_cold('rubocop', '/usr/bin/rubocop', args)
    assert_equal 3, [first.stdout, second.stdout, third.stdout].uniq.size
    assert_empty [first, second, third].flat_map(&:notices)
  end

  # `-s FILE` with the source on stdin, `-A` (the file it writes must be the same), and
  # `--parallel` (rubocop forks its own workers).
  def stdin_autocorrect_parallel
    src = "def foo( a )\n  x = 1\n  return a\nend\n"
    a = File.join(@dir, 'a.rb')
    File.write(File.join(@dir, 'b.rb'), src)
    [[['--cache', 'false', '-s', 'x.rb'], src], [['--cache', 'false', '-A', 'a.rb'], ''],
     [['--cache', 'false', '--parallel', 'a.rb', 'b.rb'], '']].each do |args, stdin|
      File.write(a, src)
      warm = @w.session('rubocop', args, env: env, dir: @dir, stdin: stdin)
      warm_file = File.read(a)
      File.write(a, src)
      cold = NgwTest.cold(['/usr/bin/rubocop', *args], env: env, dir: @dir, stdin: stdin)
      assert_equal [cold[:stdout], cold[:stderr], "#{cold[:status].exitstatus}\n", File.read(a)],
                   [warm.stdout, warm.stderr, warm.exit, warm_file], args.inspect
      assert_empty warm.notices
    end
  end
end

class TestRake < Minitest::Test
  include ProgramHelpers

  RAKEFILE = File.read(File.expand_path('fixtures/Rakefile', __dir__))

  def test_tasks_as_cold
    File.write(File.join(@dir, 'Rakefile'), RAKEFILE)
    sub = File.join(@dir, 'sub')
    Dir.mkdir(sub)
    learned_worker('rake=/usr/bin/rake', 'rake', ['show'])
    res = assert_same_as_cold('rake', '/usr/bin/rake', ['show'], env: env('GREETING' => 'hello'))
    assert_includes res.stdout, 'GREETING=hello'
    assert_includes assert_same_as_cold('rake', '/usr/bin/rake', [], dir: sub).stdout, "pwd #{@dir}"
    assert_equal "1\n", assert_same_as_cold('rake', '/usr/bin/rake', ['fail']).exit
    assert_same_as_cold('rake', '/usr/bin/rake', ['-T'])
    assert_same_as_cold('rake', '/usr/bin/rake', ['nosuch'])
  end
end

class TestGems < Minitest::Test
  include ProgramHelpers

  RAKEFILE = <<~'RUBY'
    task :default do
      puts "pwd #{Dir.pwd} ngwfake #{Gem::Specification.find_all_by_name('ngwfake').map(&:full_name)}"
      File.write(ENV['MEMO_PROBE'], Ngw::ResolveMemo.hits.to_s) if defined?(Ngw::ResolveMemo) && ENV['MEMO_PROBE']
    end
  RUBY

  # rake, rehearsed (`rake --version`): the binstub's gem resolution is skipped if the
  # rehearsal showed it does nothing (the Rakefile writes what the worker's memo served,
  # warm runs only), as cold. A gem installed in a gem directory of GEM_PATH then makes
  # the next session stale: it runs the cold way and the worker retires.
  def test_gem_resolution_skipped_until_a_gem_is_installed
    File.write(File.join(@dir, 'Rakefile'), RAKEFILE)
    specs = File.join(@dir, 'gems', 'specifications')
    FileUtils.mkdir_p(specs)
    genv = env('GEM_PATH' => [File.join(@dir, 'gems'), *Gem.path].join(':'))
    @w = NgwTest::Driver.new('rake=/usr/bin/rake', state_dir: @state, env: genv)
    assert_equal 'retire', @w.session('rake', [], env: genv, dir: @dir).notices.last&.fetch('kind')
    @w.wait_exit
    @w.close
    @w = NgwTest::Driver.new('--no-learn', '--rehearse', 'rake=--version', 'rake=/usr/bin/rake',
                             state_dir: @state, env: genv)
    NgwTest.rehearsed(@w)
    # Kept where the rehearsal's resolution activated nothing (Debian's rake 13 activates
    # the default gem `set` there, and then it is not kept).
    kept = @w.log[/rehearsed rake --version \(exit 0\).* (\d) gem resolution/, 1]
    probe = File.join(@dir, 'probe')
    res = assert_same_as_cold('rake', '/usr/bin/rake', [], env: genv.merge('MEMO_PROBE' => probe))
    assert_empty res.notices
    assert_includes res.stdout, 'ngwfake []'
    assert_equal kept, File.read(probe)
    File.unlink(probe)
    File.write(File.join(specs, 'ngwfake-1.0.gemspec'), <<~RUBY)
      Gem::Specification.new do |s|
        s.name = 'ngwfake'
        s.version = '1.0'
        s.summary = 'A gem installed between two sessions.'
        s.authors = ['ngw']
        s.files = []
      end
    RUBY
    res = assert_same_as_cold('rake', '/usr/bin/rake', [], env: genv.merge('MEMO_PROBE' => probe))
    assert_includes res.stdout, 'ngwfake ["ngwfake-1.0"]'
    assert_equal(%w[stale retire fallback], res.notices.map { |n| n['kind'] })
    assert_match(/#{specs} changed/, res.notices[0]['message'])
    refute File.exist?(probe)
  end
end

class TestZygote < Minitest::Test
  include ProgramHelpers

  def write_lib(version)
    File.write(File.join(@dir, 'mylib.rb'), <<~RUBY)
      # A preloaded library reading a variable at load time.
      MYLIB_VERSION = #{version}
      MYLIB_MODE = ENV.fetch('MYLIB_MODE', 'plain')
    RUBY
  end

  def start
    write_lib(1)
    File.write(File.join(@dir, 'prog.rb'), <<~RUBY)
      require #{File.join(@dir, 'mylib').inspect}
      puts "version \#{MYLIB_VERSION} mode \#{MYLIB_MODE} args \#{ARGV.inspect}"
    RUBY
    @w = NgwTest::Driver.new('--no-learn', '--preload', File.join(@dir, 'mylib.rb'),
                             "prog=#{File.join(@dir, 'prog.rb')}", state_dir: @state)
  end

  def test_a_variable_read_while_preloading_is_in_the_key
    start
    res = @w.session('prog', ['a'], env: env, dir: @dir)
    assert_equal "version 1 mode plain args [\"a\"]\n", res.stdout
    assert_empty res.notices
    res = @w.session('prog', ['b'], env: env('MYLIB_MODE' => 'fancy'), dir: @dir)
    assert_equal "version 1 mode fancy args [\"b\"]\n", res.stdout
    assert_equal(['fallback'], res.notices.map { |n| n['kind'] })
    assert_match(/MYLIB_MODE differs/, res.notices[0]['message'])
  end

  def test_stale_code_runs_the_new_code_and_retires
    start
    assert_equal "version 1 mode plain args []\n", @w.session('prog', [], env: env, dir: @dir).stdout
    sleep 0.01
    write_lib(22)
    res = @w.session('prog', [], env: env, dir: @dir)
    assert_equal "version 22 mode plain args []\n", res.stdout
    assert_equal(%w[stale retire fallback], res.notices.map { |n| n['kind'] })
    assert_equal 0, @w.wait_exit.exitstatus
  end

  def test_a_failing_preload_is_an_error_hello
    @w = NgwTest::Driver.new('--preload', 'no/such/feature', 'x=/bin/true', state_dir: @state)
    assert_match(/preload failed: LoadError/, @w.hello['error'])
    assert_equal 78, @w.wait_exit.exitstatus
  end
end
