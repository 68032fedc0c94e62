//! Every binary parses the library's definition of its flags (`nsyskit::flags`, the one the Nushell plugin
//! builds its signatures from; nu-plugin/tests/flag_twins.rs checks the twins): its `--help` and `-h` are
//! exactly what that clap command renders.

use assert_cmd::Command;

#[test]
fn each_binary_prints_the_help_of_its_library_definition() {
    let mut checked = 0;
    for cmd in nsyskit::flags::commands() {
        let name = cmd.get_name().to_string();
        if name == "pod-attach" {
            // its binary is the nsyskit-pod-attach crate's (bins/pod-attach), checked there
            continue;
        }
        for flag in ["--help", "-h"] {
            // what clap prints for this flag with the library's command
            let want = cmd.clone().try_get_matches_from([name.as_str(), flag]).unwrap_err().render().to_string();
            let out = Command::cargo_bin(&name).unwrap().arg(flag).env("COLUMNS", "100").output().unwrap();
            assert!(out.status.success(), "{name} {flag}");
            assert_eq!(String::from_utf8(out.stdout).unwrap(), want, "{name} {flag}");
        }
        checked += 1;
    }
    assert_eq!(checked, 10);
}
