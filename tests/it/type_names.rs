//! Each public type name of the library has one meaning (issue #18): no two `pub struct`/`pub enum`/`pub type`
//! in src/ share a name. (Schema definition names are kept with `#[schemars(rename)]` where a type was
//! renamed, so the documents and schemas did not change.)

use std::collections::BTreeMap;
use std::path::Path;

fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            walk(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn public_type_names_are_unique() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    walk(&root.join("src"), &mut files);
    let decl = regex::Regex::new(r"(?m)^\s*pub (?:struct|enum|type) ([A-Z][A-Za-z0-9_]*)").unwrap();
    let mut seen: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        for c in decl.captures_iter(&text) {
            let rel = f.strip_prefix(root).unwrap().display().to_string();
            seen.entry(c[1].to_string()).or_default().push(rel);
        }
    }
    assert!(seen.len() > 100, "only {} public types found", seen.len());
    let doubled: Vec<String> =
        seen.iter().filter(|(_, at)| at.len() > 1).map(|(n, at)| format!("{n}: {}", at.join(", "))).collect();
    assert!(doubled.is_empty(), "public type names with several meanings:\n{}", doubled.join("\n"));
}
