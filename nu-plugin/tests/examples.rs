//! Every command's examples run through nu-plugin-test-support and give their documented results.

use nu_plugin_nsyskit::{commands, NsyskitPlugin};
use nu_plugin_test_support::PluginTest;

fn plugin_test() -> PluginTest {
    // commands read fixtures through relative paths; PluginTest's current directory is the process's
    std::env::set_current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/..")).unwrap();
    PluginTest::new("nsyskit", NsyskitPlugin.into()).expect("plugin test engine")
}

#[test]
fn every_command_has_passing_examples() {
    let mut test = plugin_test();
    let all = commands::all();
    assert!(!all.is_empty());
    for cmd in &all {
        assert!(!cmd.examples().is_empty(), "{} has no example", cmd.name());
        assert!(cmd.examples().iter().all(|e| e.result.is_some()), "{}: every example has a checked result", cmd.name());
        test.test_examples(&cmd.examples()).unwrap_or_else(|e| panic!("{}: {e:?}", cmd.name()));
    }
}
