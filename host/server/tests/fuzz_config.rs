//! Bad input searched for rather than waited for: the TOML configuration, as a valid file with
//! a few bytes replaced, inserted or removed. `Config::parse` must answer a located error or a
//! configuration — never panic. A bounded run (`PROPTEST_CASES`, default 256) is part of the
//! test command.

use std::path::Path;

use percolator_server::config::Config;
use proptest::prelude::*;

const VALID: &str = r#"[store]
path = "s.redb"
durability = "none"
[scanner]
threads = 2
[observers]
dir = "."
[http]
listen = "127.0.0.1:0"
[[binding]]
name = "upper"
wasm = "uppercase.wasm"
table = "docs"
column = "raw:text"
writes = ["docs/derived:*"]
reads = ["docs/raw:*"]
max_attempts = 3
timeout_ms = 100
memory_mb = 16
"#;

proptest! {
    #[test]
    fn mutated_configurations_never_panic(
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 0..6)
    ) {
        let mut b = VALID.as_bytes().to_vec();
        for (at, byte, kind) in edits {
            let i = at.index(b.len().max(1)).min(b.len().saturating_sub(1));
            match kind {
                0 if !b.is_empty() => b[i] = byte,
                1 => b.insert(i, byte),
                _ if !b.is_empty() => {
                    b.remove(i);
                }
                _ => {}
            }
        }
        let src = String::from_utf8_lossy(&b);
        if let Err(e) = Config::parse(Path::new("/nonexistent/p.toml"), &src) {
            // Every error names the file.
            prop_assert!(e.to_string().starts_with("/nonexistent/p.toml"), "{e}");
        }
    }
}
