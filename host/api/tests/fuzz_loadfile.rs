//! Bad input searched for rather than waited for: load files (JSONL and CSV) made of mutated
//! valid records and of arbitrary bytes. Parsing must answer `Ok` or a list of located
//! problems — never panic — and what it accepts must be well-formed records. A bounded run
//! (`PROPTEST_CASES`, default 256 per property) is part of the test command; a crash found
//! becomes a regression case in `proptest-regressions/`.

use percolator_api::loadfile::{self, Format, Options};
use proptest::prelude::*;

fn options(format: Format) -> Options {
    Options { format, key: "url".into(), family: "raw".into(), base64: ["html".to_owned()].into_iter().collect() }
}

const JSONL: &str = "{\"url\": \"http://a.example/\", \"html\": \"PGI+aGk8L2I+\", \"pagerank\": 0.5}\n\
                     {\"url\": 7, \"title\": \"x\", \"tags\": [1, 2], \"gone\": null}\n";
const CSV: &str = "url,html,title\nhttp://a.example/,PGI+,\"a, b\"\nhttp://b.example/,,\"q\"\"uote\"\n";

/// `base` with a few bytes replaced, inserted or removed at chosen positions.
fn mutated(base: &'static str) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 0..8).prop_map(move |edits| {
        let mut b = base.as_bytes().to_vec();
        for (at, byte, kind) in edits {
            if b.is_empty() {
                b.push(byte);
                continue;
            }
            let i = at.index(b.len());
            match kind {
                0 => b[i] = byte,
                1 => b.insert(i, byte),
                _ => {
                    b.remove(i);
                }
            }
        }
        b
    })
}

fn check(bytes: &[u8], format: Format) {
    if let Ok(parsed) = loadfile::parse("f", bytes, "pages", &options(format)) {
        for r in &parsed.records {
            assert!(!r.row.is_empty(), "an accepted record has a row");
            for (column, _) in &r.cells {
                percolator_store::validate_column(column).unwrap();
            }
        }
    }
}

proptest! {
    #[test]
    fn mutated_jsonl_never_panics(bytes in mutated(JSONL)) {
        check(&bytes, Format::Jsonl);
    }

    #[test]
    fn mutated_csv_never_panics(bytes in mutated(CSV)) {
        check(&bytes, Format::Csv);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
        check(&bytes, Format::Jsonl);
        check(&bytes, Format::Csv);
    }
}
