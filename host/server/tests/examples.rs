//! End-to-end: the small example observers as real guest components (built by
//! `scripts/build-guests` into `target/guests`) on a host over a redb store in a temp dir.
//!
//! - `bank-transfer` (the paper's Figure 4): concurrent random transfers conserve money, never
//!   overdraw, decide every request once, and leave exactly the balances of the "done" ones.
//! - `word-count`: documents sharing hot words, written and rewritten concurrently; each word's
//!   total is a combined column (`[[combine]]`, sum of i64) the observer adds deltas to, and
//!   every total ends exact (incremental = batch).
//!
//! Run with `scripts/build-guests && cargo test -p percolator-host --test examples`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use percolator_store::Transaction;

#[path = "../../tests/common/mod.rs"]
mod common;

use common::start;

/// More scanner threads than cores: runs get preempted mid-transaction and overlap.
const SCANNER_THREADS: usize = 4;

/// Generous: two cores shared with other builds, and every run is a Wasm call.
const QUIET: Duration = Duration::from_secs(120);

/// A small deterministic generator (splitmix64): the tests need no `rand` dependency, and a
/// failure can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n`.
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Every `(row, value)` of one column of a table, as text.
fn column(t: &Transaction, table: &str, column: &str) -> BTreeMap<String, String> {
    t.scan(table, b"", None, Some(&[column]), 1_000_000)
        .unwrap()
        .into_iter()
        .map(|e| (String::from_utf8(e.row).unwrap(), String::from_utf8(e.value).unwrap()))
        .collect()
}

const BANK_BINDING: &str = r#"
[[binding]]
name = "bank"
wasm = "bank_transfer.wasm"
table = "transfers"
column = "req:amount"
notify = "strong"
reads = ["bank/bal:*", "transfers/req:*"]
writes = ["bank/bal:amount", "transfers/req:status"]
"#;

/// One generated transfer request and what kind of outcome it must get.
struct Request {
    id: String,
    from: String,
    to: String,
    amount: String,
    /// `Some(field)`: must be rejected with a reason naming `field`.
    invalid: Option<&'static str>,
}

#[test]
fn concurrent_bank_transfers_conserve_money_and_match_a_replay_of_the_done_ones() {
    const ACCOUNTS: usize = 20;
    const REQUESTS: usize = 300;
    const WRITERS: usize = 4;
    let h = start("examples-bank", &[("bank_transfer.wasm", "bank-transfer")], BANK_BINDING, SCANNER_THREADS);
    let account = |i: u64| format!("acct{i:02}");
    let initial: BTreeMap<String, i128> = (0..ACCOUNTS as u64).map(|i| (account(i), 50 + 10 * i as i128)).collect();
    h.store
        .run(|t| {
            for (name, balance) in &initial {
                t.set("bank", name, "bal:amount", balance.to_string())?;
            }
            Ok(())
        })
        .unwrap();

    let mut rng = Rng(0xba5e_ba11);
    let requests: Vec<Request> = (0..REQUESTS)
        .map(|i| {
            let mut r = Request {
                id: format!("t{i:04}"),
                // Half the requests draw from three hot accounts: transfers race on them.
                from: account(if rng.below(2) == 0 { rng.below(3) } else { rng.below(ACCOUNTS as u64) }),
                to: account(rng.below(ACCOUNTS as u64)),
                amount: (1 + rng.below(150)).to_string(),
                invalid: None,
            };
            match rng.below(100) {
                0..=2 => (r.from, r.invalid) = ("nobody".into(), Some("req:from")),
                3..=5 => (r.to, r.invalid) = ("nobody".into(), Some("req:to")),
                6..=8 => (r.amount, r.invalid) = (format!("{}x", r.amount), Some("req:amount")),
                _ => {}
            }
            if r.invalid.is_none() && r.from == r.to {
                r.invalid = Some("req:from and req:to");
            }
            r
        })
        .collect();
    let requests = Arc::new(requests);

    // Several clients submit concurrently; each request is one transaction of three cells.
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (store, requests) = (h.store.clone(), requests.clone());
            std::thread::spawn(move || {
                for r in requests.iter().skip(w).step_by(WRITERS) {
                    store
                        .run(|t| {
                            t.set("transfers", &r.id, "req:from", r.from.as_str())?;
                            t.set("transfers", &r.id, "req:to", r.to.as_str())?;
                            t.set("transfers", &r.id, "req:amount", r.amount.as_str())
                        })
                        .unwrap();
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    assert!(h.store.wait_quiescent(QUIET).unwrap(), "quiescent");

    let t = h.store.begin().unwrap();
    let statuses = column(&t, "transfers", "req:status");
    let balances: BTreeMap<String, i128> = column(&t, "bank", "bal:amount")
        .into_iter()
        .map(|(name, b)| {
            let b: u64 = b.parse().unwrap_or_else(|_| panic!("{name}: balance {b:?} is not a whole number"));
            (name, i128::from(b))
        })
        .collect();
    drop(t);

    let mut replay = initial.clone();
    let (mut done, mut insufficient) = (0, 0);
    for r in requests.iter() {
        let status = statuses.get(&r.id).unwrap_or_else(|| panic!("request {} has no status", r.id));
        match (r.invalid, status.as_str()) {
            (Some(field), s) => {
                assert!(s.starts_with("rejected: ") && s.contains(field), "{}: {field}: {s:?}", r.id)
            }
            (None, "done") => {
                let amount: i128 = r.amount.parse().unwrap();
                *replay.get_mut(&r.from).unwrap() -= amount;
                *replay.get_mut(&r.to).unwrap() += amount;
                done += 1;
            }
            (None, "insufficient funds") => insufficient += 1,
            (None, s) => panic!("{}: a valid request got {s:?}", r.id),
        }
    }
    assert_eq!(balances, replay, "balances are exactly the done transfers applied");
    assert_eq!(balances.values().sum::<i128>(), initial.values().sum::<i128>(), "money is conserved");
    assert!(replay.values().all(|b| *b >= 0), "no balance ever negative at the end: {replay:?}");
    assert!(done > 0 && insufficient > 0, "both outcomes exercised: {done} done, {insufficient} insufficient");
    assert_eq!(h.store.metrics().observer_failures, 0);
    assert!(h.store.dead_letters().unwrap().is_empty());

    // Every request was decided by exactly one committed run; the runs that raced on the hot
    // accounts and lost are counted apart (not as successes, not as failures), and the hot
    // accounts' balances are the cells they lost on.
    h.pipeline.persist_counts().unwrap();
    let status = h.pipeline.status();
    let bank = status.bindings.iter().find(|b| b.name == "bank").unwrap();
    assert_eq!(bank.settled.committed, REQUESTS as u64, "{bank:?}");
    assert!(bank.settled.lost_to_conflict > 0, "transfers from three hot accounts race: {bank:?}");
    assert_eq!(bank.counts.failures, 0);
    assert_eq!(
        bank.counts.runs,
        bank.settled.committed + bank.settled.lost_to_conflict,
        "every call of the component committed or lost: {bank:?}"
    );
    let hot = h.store.hot_rows(Duration::from_secs(600), 3);
    assert!(!hot.is_empty());
    assert_eq!((hot[0].cell.table.as_str(), hot[0].cell.column.as_str()), ("bank", "bal:amount"), "{hot:?}");
    assert_eq!(hot[0].observers[0].0, "bank");
    // Saved with the other counts: a restarted host continues them.
    let saved = h.store.saved_totals("observer/bank").unwrap();
    assert_eq!(saved.get("committed"), Some(&(REQUESTS as u64)), "{saved:?}");
    assert_eq!(saved.get("lost_to_conflict"), Some(&bank.settled.lost_to_conflict), "{saved:?}");
}

const WORD_COUNT_BINDINGS: &str = r#"
[[combine]]
table = "words"
column = "count:total"
op = "sum"
type = "i64"

[[binding]]
name = "wc-split"
wasm = "word_count.wasm"
table = "docs"
column = "raw:text"
reads = ["docs/wc:words"]
writes = ["docs/wc:words", "words/count:total"]
"#;

/// The guest's tokenizer, for ASCII text: lowercase alphanumeric runs.
fn count_words(text: &str) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for w in text.to_ascii_lowercase().split(|c: char| !c.is_ascii_alphanumeric()).filter(|w| !w.is_empty()) {
        *counts.entry(w.to_owned()).or_insert(0) += 1;
    }
    counts
}

#[test]
fn concurrent_word_count_with_combined_hot_rows_ends_exact() {
    const DOCS: u64 = 30;
    const WRITERS: u64 = 4;
    const WRITES_PER_WRITER: u64 = 40;
    let h = start("examples-wordcount", &[("word_count.wasm", "word-count")], WORD_COUNT_BINDINGS, SCANNER_THREADS);
    // Hot words are in nearly every document; the cold ones are spread thin.
    let hot = ["The", "a", "OF"];
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let store = h.store.clone();
            std::thread::spawn(move || {
                let mut rng = Rng(w + 1);
                for _ in 0..WRITES_PER_WRITER {
                    let doc = format!("doc{:02}", rng.below(DOCS));
                    let text = if rng.below(20) == 0 {
                        String::new()
                    } else {
                        (0..5 + rng.below(20))
                            .map(|_| match rng.below(2) {
                                0 => hot[rng.below(hot.len() as u64) as usize].to_owned(),
                                _ => format!("w{}", rng.below(40)),
                            })
                            .collect::<Vec<_>>()
                            .join(if rng.below(2) == 0 { " " } else { ", " })
                    };
                    store.run(|t| t.set("docs", &doc, "raw:text", text.as_str())).unwrap();
                    std::thread::sleep(Duration::from_millis(rng.below(5)));
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    assert!(h.store.wait_quiescent(QUIET).unwrap(), "quiescent");

    let t = h.store.begin().unwrap();
    let texts = column(&t, "docs", "raw:text");
    let published = column(&t, "docs", "wc:words");
    let totals = column(&t, "words", "count:total");
    drop(t);

    let mut batch: BTreeMap<String, u64> = BTreeMap::new();
    let mut batch_published = BTreeMap::new();
    for (doc, text) in &texts {
        let counts = count_words(text);
        for (word, c) in &counts {
            *batch.entry(word.clone()).or_insert(0) += c;
        }
        if !counts.is_empty() {
            let lines: String = counts.iter().map(|(w, c)| format!("{w}\t{c}\n")).collect();
            batch_published.insert(doc.clone(), lines);
        }
    }
    assert!(texts.len() > 20 && batch["the"] > 30, "the test wrote hot words: {texts:?}");
    assert_eq!(published, batch_published, "each run's record matches its document's final text");
    // A word no document has any more reads 0 (its deltas summed to nothing).
    let totals: BTreeMap<String, u64> = totals
        .into_iter()
        .map(|(w, c)| (w, c.parse().unwrap_or_else(|_| panic!("total {c:?} is not a whole number"))))
        .filter(|(_, c)| *c != 0)
        .collect();
    assert_eq!(totals, batch, "every total equals a batch count over the final texts");
    // Every run succeeded (two runs on one document conflict on its record and are retried).
    assert_eq!(h.store.metrics().observer_failures, 0);
    assert!(h.store.dead_letters().unwrap().is_empty());
}
