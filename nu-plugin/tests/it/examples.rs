//! Every command's examples run through nu-plugin-test-support and give their documented results.

use nu_plugin_nsyskit::{commands, NsyskitPlugin};
use nu_plugin_test_support::PluginTest;
use nu_protocol::Value;

/// A PluginTest engine whose current directory ($env.PWD) is the workspace root: the examples read the
/// fixtures through relative paths, as a user in a checkout would.
pub fn plugin_test() -> PluginTest {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().canonicalize().unwrap();
    let mut test = PluginTest::new("nsyskit", NsyskitPlugin.into()).expect("plugin test engine");
    test.engine_state_mut().add_env_var("PWD".into(), Value::test_string(root.display().to_string()));
    test
}

#[test]
fn every_command_has_passing_examples() {
    let mut test = plugin_test();
    let all = commands::all();
    assert!(!all.is_empty());
    let nsys = std::path::Path::new(&std::env::var("HOME").unwrap_or_default())
        .join(".cache/nsyskit/nsys-2023.4/usr/bin/nsys");
    for cmd in &all {
        if matches!(cmd.name(), "nsys-resolve" | "serve-capture") && !nsys.is_file() {
            eprintln!(
                "SKIP {} examples: no nsys 2023.4 at {} (scripts/get-nsys installs it)",
                cmd.name(),
                nsys.display()
            );
            continue;
        }
        if cmd.name() == "serve-capture" {
            // the example's run folder must be fresh, as --out requires
            let run = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/nsyskit-examples/serve-capture");
            let _ = std::fs::remove_dir_all(&run);
        }
        assert!(!cmd.examples().is_empty(), "{} has no example", cmd.name());
        assert!(
            cmd.examples().iter().all(|e| e.result.is_some()),
            "{}: every example has a checked result",
            cmd.name()
        );
        test.test_examples(&cmd.examples()).unwrap_or_else(|e| panic!("{}: {e:?}", cmd.name()));
    }
}
