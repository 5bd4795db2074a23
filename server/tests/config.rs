//! Finding the config file through the environment: `XDG_CONFIG_HOME`, then `HOME`.
//!
//! One test only, because it changes this process's environment.

use std::path::PathBuf;

use ng_server::config::{default_config_path, ConfigError, ServerConfig};

#[test]
fn default_config_file_is_optional_and_found_through_xdg_config_home() {
    let tmp = tempfile::tempdir().unwrap();
    let xdg = tmp.path().join("xdg");
    std::env::set_var("XDG_CONFIG_HOME", &xdg);
    std::env::set_var("HOME", tmp.path().join("home"));
    let expected = xdg.join("ngd/ngd.toml");
    assert_eq!(default_config_path(), Some(expected.clone()));

    // No file at the default place: the defaults, and no path.
    let loaded = ServerConfig::load(None).unwrap();
    assert_eq!(loaded.config, ServerConfig::default());
    assert_eq!(loaded.path, None);

    // A file there is read.
    std::fs::create_dir_all(expected.parent().unwrap()).unwrap();
    std::fs::write(
        &expected,
        "max_connections = 3\n[aliases]\nc = \"ng-cat\"\n",
    )
    .unwrap();
    let loaded = ServerConfig::load(None).unwrap();
    assert_eq!(loaded.config.max_connections, 3);
    assert_eq!(loaded.config.aliases["c"], "ng-cat");
    assert_eq!(loaded.path.as_deref(), Some(expected.as_path()));

    // A broken default file is an error, not a silent fallback.
    std::fs::write(&expected, "max_conections = 3\n").unwrap();
    let err = ServerConfig::load(None).unwrap_err();
    assert!(matches!(err, ConfigError::Parse { .. }), "{err:?}");
    assert!(err.to_string().contains("line 1, column 1"), "{err}");

    // An explicit file wins over the default one.
    let explicit = tmp.path().join("other.toml");
    std::fs::write(&explicit, "nail_threads = 2\n").unwrap();
    let loaded = ServerConfig::load(Some(&explicit)).unwrap();
    assert_eq!(loaded.config.nail_threads, 2);
    assert_eq!(loaded.path, Some(explicit));

    // Without XDG_CONFIG_HOME: ~/.config.
    std::env::remove_var("XDG_CONFIG_HOME");
    assert_eq!(
        default_config_path(),
        Some(tmp.path().join("home/.config/ngd/ngd.toml"))
    );
    let loaded = ServerConfig::load(None).unwrap();
    assert_eq!(loaded.path, None::<PathBuf>);
}
