//! Observers written in Python (componentize-py, built by `scripts/build-guests-python`) in a
//! host: the uppercase observer end to end with parameters, and a hostile guest bound once per
//! misbehaviour (its `mode` parameter) — a busy loop, a memory bomb, a file, a socket, the
//! environment, the clock and randomness, an exception — each contained, with what it saw or
//! why it failed, while the host keeps serving; the SDK's combine (deltas of every kind, and
//! refused ones) through the host; and tag-count (config/tag-count.toml), which
//! combines ±1 per tag into a combined column, checked against a from-scratch count while
//! documents change their tags concurrently.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

#[path = "../../tests/common/mod.rs"]
mod common;

const QUIET: Duration = Duration::from_secs(120);

#[test]
fn a_python_observer_runs_with_its_parameters() {
    common::uppercase_runs_with_its_parameters("python-upper", "uppercase_py");
}

#[test]
fn python_combine_deltas_of_every_kind_reach_the_host() {
    common::combine_deltas_of_every_kind_reach_the_host("py-combine", "hostile_py");
}

#[test]
fn hostile_python_guests_are_contained_and_say_what_they_met() {
    let modes = [
        ("spin", "timeout_ms = 300\n"),
        ("bomb", "memory_mb = 64\n"),
        ("file", ""),
        ("socket", ""),
        ("env", ""),
        ("clock", "clock = \"fixed\"\nrandom_seed = 7\n"),
        ("raise", ""),
    ];
    let (h, dead) = common::run_hostile_modes("py-hostile", "hostile_py", "uppercase_py", &modes, |store| {
        store.run(|t| t.set("docs", "r2", "in:clock", "again")).unwrap();
    });
    let error = |o: &str| common::dead_letter_error(&dead, o);
    assert!(error("spin").contains("deadline of 300 ms exceeded"), "{}", error("spin"));
    assert!(error("bomb").contains("memory limit of 64 MiB"), "{}", error("bomb"));
    // No folder is preopened: the open fails inside the guest, which sees an OSError.
    assert!(error("file").contains("Error") && error("file").contains("/etc/passwd"), "{}", error("file"));
    assert!(error("socket").contains("Error"), "{}", error("socket"));
    // The exception's message and the guest's own stderr line reach the dead letter.
    let raised = error("raise");
    assert!(raised.contains("ZeroDivisionError: division by zero"), "{raised}");
    assert!(raised.contains("about to divide"), "stderr is carried: {raised}");
    let t = h.store.begin().unwrap();
    let text = |row: &str, col: &str| String::from_utf8(t.get("docs", row, col).unwrap().unwrap()).unwrap();
    assert_eq!(text("r1", "out:env"), r#"{"environ": {}, "argv": []}"#);
    // Fixed clock and seeded randomness: two runs see the same time and the same bytes.
    assert_eq!(text("r1", "out:clock"), text("r2", "out:clock"));
    assert!(text("r1", "out:clock").starts_with(r#"{"time": 946684800.0"#), "{}", text("r1", "out:clock"));
    for mode in ["spin", "bomb", "file", "socket", "raise"] {
        assert_eq!(t.get("docs", "r1", &format!("out:{mode}")).unwrap(), None, "{mode} wrote nothing");
    }
    assert_eq!(t.get("docs", "healthy", "derived:upper").unwrap(), Some(b"STILL SERVING".to_vec()));
    assert_eq!(dead.len(), 5, "{dead:?}");
}

/// The example's parsing: comma-separated, trimmed, non-empty, at most 200 bytes, distinct.
fn parse_tags(text: &str) -> BTreeSet<String> {
    text.split(',').map(str::trim).filter(|t| !t.is_empty() && t.len() <= 200).map(str::to_owned).collect()
}

/// Every tag's count as read (zeros left out: a tag no document carries any more reads 0).
fn tag_counts(store: &percolator_store::Store) -> BTreeMap<String, i64> {
    let t = store.begin().unwrap();
    let entries = t.scan("tags", b"", None, Some(&["count:n"]), 1_000_000).unwrap();
    entries
        .into_iter()
        .map(|e| {
            let v = String::from_utf8(e.value).unwrap();
            (String::from_utf8(e.row).unwrap(), v.parse().unwrap_or_else(|_| panic!("count {v:?} is not an i64")))
        })
        .filter(|(_, n)| *n != 0)
        .collect()
}

#[test]
fn tag_count_equals_a_from_scratch_count_as_documents_change_tags() {
    // The pipeline part of the shipped configuration: its [[combine]] and [[binding]].
    let config = std::fs::read_to_string(common::workspace().join("config/tag-count.toml")).unwrap();
    let pipeline = &config[config.find("[[combine]]").expect("config/tag-count.toml has a [[combine]]")..];
    let h = common::start_cached("py-tag-count", &[("tag-count_py.wasm", "tag-count_py")], pipeline, 4);
    const DOCS: u64 = 40;
    const WRITERS: u64 = 4;
    let tags = ["rust", "wasm", "python", "js", "db", "hot", "ünïcode tag", "x"];
    let mut docs: BTreeMap<String, Option<String>> = BTreeMap::new();
    for round in 0..3u64 {
        // Each writer owns a share of the documents and rewrites them, concurrently with the
        // others and with the observer's runs; "hot" is on most documents.
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let store = h.store.clone();
                std::thread::spawn(move || {
                    let mut seed = (round * WRITERS + w + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                    let mut below = |n: u64| {
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        seed % n
                    };
                    let mut last = BTreeMap::new();
                    for _ in 0..30 {
                        let doc = format!("doc{:02}", w + WRITERS * below(DOCS / WRITERS));
                        let text = match below(12) {
                            0 => None,
                            _ => {
                                let mut t: Vec<&str> =
                                    (0..below(4)).map(|_| tags[below(tags.len() as u64) as usize]).collect();
                                if below(4) != 0 {
                                    t.push(" hot ");
                                }
                                Some(t.join(","))
                            }
                        };
                        store
                            .run(|t| match &text {
                                Some(text) => t.set("docs", &doc, "doc:tags", text.as_str()),
                                None => t.delete("docs", &doc, "doc:tags"),
                            })
                            .unwrap();
                        last.insert(doc, text);
                        std::thread::sleep(Duration::from_millis(below(3)));
                    }
                    last
                })
            })
            .collect();
        for w in writers {
            docs.extend(w.join().unwrap());
        }
        assert!(h.store.wait_quiescent(QUIET).unwrap(), "quiescent after round {round}");
        let mut batch: BTreeMap<String, i64> = BTreeMap::new();
        for tag in docs.values().flatten().flat_map(|t| parse_tags(t)) {
            *batch.entry(tag).or_insert(0) += 1;
        }
        assert!(batch["hot"] > 5, "the test wrote a hot tag: {docs:?}");
        assert_eq!(tag_counts(&h.store), batch, "round {round}: every count equals a from-scratch count");
    }
    assert_eq!(h.store.metrics().observer_failures, 0);
    assert!(h.store.dead_letters().unwrap().is_empty());
}
