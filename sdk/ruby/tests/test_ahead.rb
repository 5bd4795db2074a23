# frozen_string_literal: true

# rubocop's default configuration built ahead by the spare (Ngw::Ahead), for the previous
# session's directory and environment: each session compared with a cold run byte for
# byte, and which path served it read from the worker's profile (NGW_RUBY_PROFILE): the
# configuration taken (`served`), built by the session because something it depends on
# differs (the directory, the environment, `--debug`, a plugin's files and cops), or no
# build ahead at all (the first session).
require 'minitest/autorun'
require 'fileutils'
require_relative 'driver'

class TestConfigAhead < Minitest::Test
  SOURCE = "def foo( a )\n  x = 1\n  return a\nend\nputs \"hi\"\n"

  def setup
    @dir = Dir.mktmpdir
    @state = File.join(@dir, '.state')
    @profile = File.join(@dir, 'profile')
    @top = File.join(@dir, 'top')
    @here = File.join(@top, 'here')
    @there = File.join(@dir, 'there')
    [@here, @there, File.join(@there, 'vendor')].each do |d|
      FileUtils.mkdir_p(d)
      File.write(File.join(d, 't.rb'), SOURCE)
    end
    w = NgwTest::Driver.new('rubocop=/usr/bin/rubocop', state_dir: @state)
    first = w.session('rubocop', %w[--cache false t.rb], env: env, dir: @here)
    assert_equal 'retire', first.notices.last&.fetch('kind')
    w.wait_exit
    w.close
    @w = NgwTest::Driver.new('--no-learn', 'rubocop=/usr/bin/rubocop',
                             state_dir: @state, env: { 'NGW_RUBY_PROFILE' => @profile })
    NgwTest.rehearsed(@w)
  end

  def teardown
    @w&.close
    FileUtils.rm_rf(@dir)
  end

  def env
    ENV.to_h.reject { |k, _| k.start_with?('NGW_') }
  end

  # Runs `rubocop ARGS` in `dir` warm and cold, asserts the same bytes, and returns what
  # became of the configuration built ahead (nil: none was built).
  def as_cold(args, dir, extra: {}, fix: ->(s) { s })
    File.write(@profile, '')
    warm = @w.session('rubocop', args, env: env.merge(extra), dir: dir)
    cold = NgwTest.cold(['/usr/bin/rubocop', *args], env: env.merge(extra), dir: dir)
    assert_equal [fix.call(cold[:stdout]), fix.call(cold[:stderr]), "#{cold[:status].exitstatus}\n"],
                 [fix.call(warm.stdout), fix.call(warm.stderr), warm.exit], "#{args} in #{dir}"
    assert_empty warm.notices
    File.read(@profile)[/ config_ahead=(\S+)/, 1]
  end

  def lint(dir = @here, **opts)
    as_cold(%w[--cache false t.rb], dir, **opts)
  end

  def test_the_configuration_built_ahead_is_taken_only_where_it_is_what_the_session_builds
    assert_nil lint, 'the first session has no build ahead'
    assert_equal 'served', lint
    # A project configuration added, changed and removed, here and in a parent: the
    # session reads it, the default configuration comes from the spare.
    config = File.join(@here, '.rubocop.yml')
    File.write(config, "Layout/SpaceInsideParens:\n  Enabled: false\n")
    assert_equal 'served', lint
    File.write(config, "Style/ReturnNil:\n  Enabled: true\nLint/UselessAssignment:\n  Enabled: false\n")
    assert_equal 'served', lint
    File.unlink(config)
    parent = File.join(@top, '.rubocop.yml')
    File.write(parent, "AllCops:\n  Exclude:\n    - 'nothing/**'\nStyle/FrozenStringLiteralComment:\n  " \
                       "Enabled: false\n")
    assert_equal 'served', lint
    File.write(parent, "Style/FrozenStringLiteralComment:\n  Enabled: true\n")
    assert_equal 'served', lint
    File.unlink(parent)
    assert_equal 'served', lint
    # Another directory: built for the previous one (its `Exclude` paths made absolute
    # from it: `vendor/` would not be left out here), so the session builds its own; the
    # next one in the same directory takes it.
    assert_equal 'dir_changed', as_cold(%w[--cache false], @there)
    assert_equal 'served', as_cold(%w[--cache false], @there)
    assert_equal 'served', lint(@there)
    # Another HOME, and what rubocop reads there.
    home = File.join(@dir, 'home')
    FileUtils.mkdir_p(home)
    File.write(File.join(home, '.rubocop.yml'), "Style/Semicolon:\n  Enabled: false\n")
    assert_equal 'env_changed', lint(@there, extra: { 'HOME' => home })
    assert_equal 'served', lint(@there, extra: { 'HOME' => home })
    # --debug prints while the default configuration is built.
    untimed = ->(s) { s.gsub(/\d+\.\d+ seconds/, 'N seconds') }
    assert_equal 'flags_changed',
                 as_cold(%w[--cache false --debug t.rb], @there, extra: { 'HOME' => home }, fix: untimed)
  end

  # A project configuration that requires a plugin of its own (a file and a cop): the
  # session loads it before it asks for the default configuration, which then is built
  # where the plugin is loaded, as cold.
  def test_a_plugin_loaded_first_makes_the_session_build_its_own
    File.write(File.join(@here, 'plugin.rb'), <<~RUBY)
      module RuboCop
        module Cop
          module Custom
            class NoPuts < Base
              def on_send(node)
                add_offense(node, message: 'No puts.') if node.method?(:puts)
              end
            end
          end
        end
      end
    RUBY
    File.write(File.join(@here, '.rubocop.yml'),
               "require:\n  - ./plugin.rb\nCustom/NoPuts:\n  Enabled: true\n")
    assert_nil lint
    assert_equal 'features_changed', lint
  end
end
