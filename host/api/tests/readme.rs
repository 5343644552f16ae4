//! The README's list of the HTTP API names every endpoint (it once lacked `/v1/replay`).

use percolator_api::endpoint::ALL;

#[test]
fn the_readme_lists_every_endpoint() {
    let readme = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
    let text = std::fs::read_to_string(&readme).unwrap();
    // Markdown wraps lines: compare with runs of whitespace as one space.
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let missing: Vec<String> = ALL
        .iter()
        .map(|d| format!("{} {}", d.method.as_str(), d.path))
        .filter(|e| !text.contains(&format!("`{e}")))
        .collect();
    assert!(missing.is_empty(), "README.md's API list lacks {missing:?}");
}
