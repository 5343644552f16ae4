//! The `[[binding]]` snippets in the guest crates' docs are the bindings of
//! `config/web-index.toml`, line for line (comments and blank lines aside), and together they
//! cover every binding of it.
//!
//! Run with `cargo test -p webindex --test config_snippets` in `guest-examples/`.

use std::collections::BTreeMap;
use std::path::Path;

/// The guest crates (folders next to this crate) whose docs show their bindings.
const GUESTS: [&str; 4] = ["document-processor", "clustering", "link-inversion", "exporter"];

/// The `[[binding]]` tables of `toml` by name: their lines, trimmed, without comments and
/// blank lines.
fn bindings(toml: &str) -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    let mut current: Option<Vec<String>> = None;
    let mut finish = |lines: Vec<String>| {
        let name = lines
            .iter()
            .find_map(|l| l.strip_prefix("name = "))
            .unwrap_or_else(|| panic!("a binding without a name: {lines:?}"))
            .trim_matches('"')
            .to_owned();
        assert!(out.insert(name.clone(), lines).is_none(), "binding {name} twice");
    };
    for line in toml.lines().map(str::trim) {
        if line.starts_with('[') {
            if let Some(lines) = current.take() {
                finish(lines);
            }
            if line == "[[binding]]" {
                current = Some(Vec::new());
            }
        } else if !line.is_empty()
            && !line.starts_with('#')
            && let Some(lines) = &mut current
        {
            lines.push(line.to_owned());
        }
    }
    if let Some(lines) = current {
        finish(lines);
    }
    out
}

/// The contents of the ```` ```toml ```` blocks of a file's `//!` docs.
fn doc_toml(source: &str) -> String {
    let mut out = String::new();
    let mut inside = false;
    for line in source.lines().filter_map(|l| l.strip_prefix("//!")) {
        let line = line.strip_prefix(' ').unwrap_or(line);
        match line.trim() {
            "```toml" => inside = true,
            "```" => inside = false,
            _ if inside => {
                out.push_str(line);
                out.push('\n');
            }
            _ => {}
        }
    }
    out
}

#[test]
fn guest_docs_show_the_bindings_of_the_config() {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = std::fs::read_to_string(here.join("../../config/web-index.toml")).unwrap();
    let config = bindings(&config);
    assert_eq!(config.len(), 7, "{:?}", config.keys());
    let mut shown = BTreeMap::new();
    for guest in GUESTS {
        let source = std::fs::read_to_string(here.join("..").join(guest).join("src/lib.rs")).unwrap();
        let snippets = bindings(&doc_toml(&source));
        assert!(!snippets.is_empty(), "{guest} shows no binding");
        for (name, lines) in snippets {
            assert_eq!(Some(&lines), config.get(&name), "{guest}'s binding {name} differs from the config's");
            shown.insert(name, lines);
        }
    }
    assert_eq!(shown, config, "every binding of the config is shown by a guest");
}
