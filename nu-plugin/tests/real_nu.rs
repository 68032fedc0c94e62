//! The plugin in a REAL nu 0.115.1: `plugin add` and `plugin use nsyskit` in a temporary config folder, then
//! real pipelines on the fixtures.

mod common;

use common::Nu;
use serde_json::json;

#[test]
fn registers_and_lists_its_commands() {
    let Some(nu) = Nu::or_skip("registers_and_lists_its_commands") else { return };
    let names = nu.json("help commands | where category == nsyskit | get name | sort");
    let names: Vec<&str> = names.as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    for expected in nu_plugin_nsyskit::commands::all().iter().map(|c| c.name().to_string()) {
        assert!(names.contains(&expected.as_str()), "{expected} missing from {names:?}");
    }
    let plugins = nu.json("plugin list | where name == nsyskit | get 0 | select name version status");
    assert_eq!(plugins["version"], env!("CARGO_PKG_VERSION"));
}

#[test]
fn typed_values_in_a_real_shell() {
    let Some(nu) = Nu::or_skip("typed_values_in_a_real_shell") else { return };
    // `_ns` integer + duration companion; `_bytes` + filesize; captured_at → date; null → nothing
    let v = nu.json(
        r#"'{"wall_ns": 1500000, "copy_bytes": 2048, "captured_at": "2026-11-29T22:45:59Z", "gap_ns": null}'
           | from nsyskit | describe"#,
    );
    assert_eq!(
        v,
        json!("record<wall_ns: int, wall: duration, copy_bytes: int, copy: filesize, captured_at: datetime, gap_ns: nothing>")
    );
    let v = nu.json(r#"'{"wall_ns": 1500000}' | from nsyskit | get wall | $in == 1.5ms"#);
    assert_eq!(v, json!(true));
    // the round trip back to JSON drops the companions and keeps the exact text of the timestamp
    let v = nu.json(r#"'{"wall_ns": 1500000, "captured_at": "2026-11-29T22:45:59Z"}' | from nsyskit | from nsyskit | columns"#);
    assert_eq!(v, json!(["wall_ns", "wall", "captured_at"]));
}
