//! The four observers together against one `MemStore`, driven to their fixed point by a small
//! scheduler that imitates the host: a write to a bound column, or a weak notification of
//! `pending/link:dirty` / `pages/export:dirty`, queues a notification once its transaction commits; runs
//! start and commit in random interleavings, racing like concurrent workers (a conflict
//! requeues the notification). Weak notifications are sometimes queued twice, as the host may
//! deliver them more than once. Every schedule must reach the same tables.

use percolator_guest::mem::{MemStore, MemTxn};
use percolator_guest::{Cell, Notification, Observer, Result, Txn};

use super::test_util::{column, dump, store};
use super::{Clustering, DocumentProcessor, Exporter, LinkInversion};
use crate::schema::*;

/// The scheduler's imitation of the host's ack columns (a table of its own, outside the state).
/// Strong bindings only: weak ones have no ack.
const ACKS: &str = "acks";

/// Is `column` bound with `notify = "weak"`?
fn weak(column: &str) -> bool {
    column == LINK_DIRTY || column == EXPORT_DIRTY
}

/// Runs the observer bound to `cell`'s column, if any.
fn dispatch(txn: &mut MemTxn, n: &Notification) -> Option<Result<()>> {
    Some(match n.column() {
        RAW_HTML => DocumentProcessor::observe(txn, n),
        DOC_HASH | RAW_PAGERANK => Clustering::observe(txn, n),
        DOC_LINKS | LINK_DIRTY | CLUSTER_CANONICAL => LinkInversion::observe(txn, n),
        EXPORT_DIRTY => Exporter::observe(txn, n),
        _ => return None,
    })
}

/// A deterministic pseudo-random schedule.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

struct Pipeline {
    store: MemStore,
    /// Notifications not yet run. A strong one is queued once however often its cell changes
    /// (they collapse); a weak one may be queued twice.
    pending: Vec<Cell>,
    rng: Rng,
    /// Most runs in flight at once.
    concurrency: usize,
    conflicts: usize,
    /// Weak notifications queued a second time.
    repeats: usize,
}

impl Pipeline {
    fn new(seed: u64, concurrency: usize) -> Pipeline {
        Pipeline { store: store(), pending: Vec::new(), rng: Rng(seed), concurrency, conflicts: 0, repeats: 0 }
    }

    /// Queues a notification of `cell` (if none is pending), and, for one in three weak ones,
    /// a second.
    fn notify(&mut self, cell: Cell) {
        if self.pending.contains(&cell) {
            return;
        }
        if weak(&cell.column) && self.rng.below(3) == 0 {
            self.repeats += 1;
            self.pending.push(cell.clone());
        }
        self.pending.push(cell);
    }

    /// A client write (the loader).
    fn put(&mut self, url: &str, column: &str, value: Option<&str>) {
        match value {
            Some(v) => self.store.put(PAGES, url, column, v),
            None => self.store.remove(PAGES, url, column),
        };
        self.notify(Cell::new(PAGES, url, column));
    }

    fn crawl(&mut self, url: &str, html: &str, pagerank: &str) {
        self.put(url, RAW_HTML, Some(html));
        self.put(url, RAW_PAGERANK, Some(pagerank));
    }

    /// Runs notifications until none is pending: at each step either starts a run of a
    /// random pending notification (at most `concurrency` in flight) or commits a random run
    /// in flight, so runs overlap in every way. Like the host's acks, each run of a strong
    /// notification writes an ack cell of its notified cell, so two runs of one notification
    /// conflict; runs of weak ones have no ack.
    fn settle(&mut self) {
        let mut in_flight: Vec<(Cell, MemTxn)> = Vec::new();
        let mut steps = 0;
        while !self.pending.is_empty() || !in_flight.is_empty() {
            steps += 1;
            assert!(steps < 100_000, "no fixed point");
            let start = !self.pending.is_empty()
                && in_flight.len() < self.concurrency
                && (in_flight.is_empty() || self.rng.below(2) == 0);
            if start {
                let cell = self.pending.swap_remove(self.rng.below(self.pending.len()));
                let mut txn = self.store.begin();
                let n = if weak(&cell.column) {
                    Notification::weak(cell.clone())
                } else {
                    txn.set(ACKS, &cell.row, &cell.column, b"").unwrap();
                    Notification::strong(cell.clone(), None)
                };
                match dispatch(&mut txn, &n) {
                    None => {}
                    Some(Ok(())) => in_flight.push((cell, txn)),
                    Some(Err(e)) => panic!("{}/{}: {e}", String::from_utf8_lossy(&cell.row), cell.column),
                }
            } else {
                let (cell, txn) = in_flight.swap_remove(self.rng.below(in_flight.len()));
                // Bound columns: written ones of `pages`, notified ones of `pages` and `pending`.
                let written: Vec<Cell> =
                    txn.buffered().keys().filter(|c| c.table == PAGES).chain(txn.buffered_weak()).cloned().collect();
                match txn.commit() {
                    Ok(_) => {
                        for cell in written {
                            self.notify(cell);
                        }
                    }
                    Err(e) if e.is_conflict() => {
                        self.conflicts += 1;
                        self.notify(cell);
                    }
                    Err(e) => panic!("{e}"),
                }
            }
        }
    }

    /// Every table (the weak-notify trigger columns never hold values).
    fn state(&self) -> Vec<(String, String, String, String)> {
        let mut out = Vec::new();
        for table in [PAGES, CLUSTERS, INLINKS, PENDING, INDEX] {
            for (row, col, value) in dump(&self.store, table) {
                out.push((table.to_owned(), row, col, value));
            }
        }
        out
    }
}

fn html(title: &str, text: &str, links: &[(&str, &str)]) -> String {
    let links: String = links.iter().map(|(href, anchor)| format!("<a href=\"{href}\">{anchor}</a> ")).collect();
    format!("<html><title>{title}</title><body><p>{text}</p>{links}</body></html>")
}

/// The crawl, then re-crawls, settling after each step; returns the states after each.
fn scenario(p: &mut Pipeline) -> Vec<Vec<(String, String, String, String)>> {
    let mut states = Vec::new();
    p.crawl("http://a.org/", &html("Apple", "apple fruit", &[("http://b.org/", "banana"), ("/x#y", "ex")]), "0.5");
    p.crawl("http://b.org/", &html("Banana", "yellow fruit", &[("http://a.org/", "apple")]), "0.9");
    p.crawl("http://b2.org/", &html("Banana", "yellow fruit", &[("/elsewhere", "apple")]), "0.95");
    p.crawl("http://d.org/", &html("Dates", "sweet", &[("http://b.org/", "best banana"), ("http://b2.org/", "")]), "0");
    p.settle();
    states.push(p.state());
    // b2 changes: b becomes canonical of the banana cluster; its inlinks move back.
    p.crawl("http://b2.org/", &html("Plantain", "green", &[("http://b.org/", "banana")]), "0.95");
    p.settle();
    states.push(p.state());
    // d joins a's cluster with a higher rank, d's links go; a's text drops a word.
    p.crawl("http://d.org/", &html("Apple", "apple", &[]), "0.7");
    p.put("http://a.org/", RAW_HTML, Some(&html("Apple", "apple", &[("http://b.org/", "banana")])));
    p.settle();
    states.push(p.state());
    // a's page disappears.
    p.put("http://a.org/", RAW_HTML, None);
    p.put("http://a.org/", RAW_PAGERANK, None);
    p.settle();
    states.push(p.state());
    states
}

/// The index: (row, column, value).
fn index(p: &Pipeline) -> Vec<(String, String, String)> {
    dump(&p.store, INDEX)
}

fn rows(v: &[(&str, &str)]) -> Vec<(String, String)> {
    v.iter().map(|(a, b)| ((*a).to_owned(), (*b).to_owned())).collect()
}

#[test]
fn sequential_pipeline_reaches_the_expected_index() {
    let mut p = Pipeline::new(1, 1);
    p.crawl("http://a.org/", &html("Apple", "apple fruit", &[("http://b.org/", "banana"), ("/x#y", "ex")]), "0.5");
    p.crawl("http://b.org/", &html("Banana", "yellow fruit", &[("http://a.org/", "apple")]), "0.9");
    p.crawl("http://b2.org/", &html("Banana", "yellow fruit", &[("/elsewhere", "apple")]), "0.95");
    p.crawl("http://d.org/", &html("Dates", "sweet", &[("http://b.org/", "best banana"), ("http://b2.org/", "")]), "0");
    p.settle();
    // b and b2 have the same title and text (anchor text included, hrefs not): one cluster,
    // canonical b2 (higher PageRank), which gets b's inlinks; b is not exported. Targets that
    // were not crawled have forwarded inlinks but are not exported.
    let (h, a) = (HIT_COUNT, ANCHOR_COUNT);
    let want: Vec<(String, String, String)> = [
        // Lengths: all term occurrences of each exported page's title and text (the empty
        // term's rows), and of the anchors forwarded to each destination.
        (" http://a.org/", a, "1"),
        (" http://a.org/", h, "5"),
        (" http://a.org/x", a, "1"),
        (" http://b2.org/", a, "3"),
        (" http://b2.org/", h, "4"),
        (" http://b2.org/elsewhere", a, "1"),
        (" http://d.org/", h, "4"),
        ("apple http://a.org/", a, "1"),
        ("apple http://a.org/", h, "2"),
        ("apple http://b2.org/", h, "1"),
        ("apple http://b2.org/elsewhere", a, "1"),
        ("banana http://a.org/", h, "1"),
        ("banana http://b2.org/", a, "2"),
        ("banana http://b2.org/", h, "1"),
        ("banana http://d.org/", h, "1"),
        ("best http://b2.org/", a, "1"),
        ("best http://d.org/", h, "1"),
        ("dates http://d.org/", h, "1"),
        ("ex http://a.org/", h, "1"),
        ("ex http://a.org/x", a, "1"),
        ("fruit http://a.org/", h, "1"),
        ("fruit http://b2.org/", h, "1"),
        ("sweet http://d.org/", h, "1"),
        ("yellow http://b2.org/", h, "1"),
    ]
    .iter()
    .map(|(r, c, v)| ((*r).to_owned(), (*c).to_owned(), (*v).to_owned()))
    .collect();
    assert_eq!(index(&p), want);
    assert_eq!(
        column(&p.store, PAGES, FWD_TO),
        rows(&[
            ("http://a.org/", "http://a.org/\n1\napple\t1\n"),
            ("http://a.org/x", "http://a.org/x\n1\nex\t1\n"),
            ("http://b.org/", "http://b2.org/\n2\nbanana\t2\nbest\t1\n"),
            ("http://b2.org/", "http://b2.org/\n1\n"),
            ("http://b2.org/elsewhere", "http://b2.org/elsewhere\n1\napple\t1\n"),
        ])
    );
    assert!(dump(&p.store, PENDING).is_empty(), "every change was forwarded");
    assert_eq!(
        column(&p.store, PAGES, CLUSTER_CANONICAL),
        rows(&[
            ("http://a.org/", "http://a.org/"),
            ("http://b.org/", "http://b2.org/"),
            ("http://b2.org/", "http://b2.org/"),
            ("http://d.org/", "http://d.org/"),
        ])
    );
}

#[test]
fn every_schedule_reaches_the_same_tables() {
    let mut reference = Pipeline::new(1, 1);
    let want = scenario(&mut reference);
    // After the last step nothing is left of a's page but what b's link to it still makes.
    let a_left: Vec<String> = want[3]
        .iter()
        .filter(|(_, row, _, _)| row.split(' ').any(|part| part == "http://a.org/"))
        .map(|(table, row, column, _)| format!("{table}/{row}/{column}"))
        .collect();
    assert_eq!(
        a_left,
        [
            "pages/http://a.org//fwd:to",
            "inlinks/http://a.org/ http://b.org//link:anchor",
            "index/ http://a.org//anchor:count",
            "index/apple http://a.org//anchor:count",
        ]
    );
    let mut conflicts = 0;
    for seed in 1..=12 {
        for concurrency in [1, 3, 6] {
            let mut p = Pipeline::new(seed * 7919, concurrency);
            let got = scenario(&mut p);
            for (step, (got, want)) in got.iter().zip(&want).enumerate() {
                assert_eq!(got, want, "seed {seed}, concurrency {concurrency}, step {step}");
            }
            conflicts += p.conflicts;
            assert!(p.repeats > 0, "weak notifications were delivered twice");
        }
    }
    assert!(conflicts > 0, "the concurrent schedules should have raced at least once");
}

/// Many pages sharing few contents, changed one input column at a time between settles (a
/// new HTML, a new PageRank, or the HTML removed): clusters gain and lose members
/// concurrently, canonicals move, inlinks are forwarded back and forth.
fn churn(p: &mut Pipeline) -> Vec<Vec<(String, String, String, String)>> {
    let mut inputs = Rng(0x9e37_79b9_7f4a_7c15);
    let urls: Vec<String> = (0..8).map(|i| format!("http://p{i}.org/")).collect();
    let contents = ["alpha", "beta", "gamma"];
    let page = |inputs: &mut Rng| {
        let content = contents[inputs.below(contents.len())];
        let target = &urls[inputs.below(urls.len())];
        html(content, content, &[(target, &format!("to {content}"))])
    };
    for url in &urls {
        let html = page(&mut inputs);
        p.crawl(url, &html, &inputs.below(3).to_string());
    }
    p.settle();
    let mut states = vec![p.state()];
    for _ in 0..30 {
        for _ in 0..1 + inputs.below(6) {
            let url = &urls[inputs.below(urls.len())];
            match inputs.below(5) {
                0 => p.put(url, RAW_HTML, None),
                1 | 2 => p.put(url, RAW_PAGERANK, Some(&inputs.below(3).to_string())),
                _ => {
                    let html = page(&mut inputs);
                    p.put(url, RAW_HTML, Some(&html));
                }
            }
        }
        p.settle();
        states.push(p.state());
    }
    states
}

#[test]
fn churn_converges_under_every_schedule() {
    let want = churn(&mut Pipeline::new(1, 1));
    let mut conflicts = 0;
    for seed in 1..=20 {
        for concurrency in [2, 4, 8] {
            let mut p = Pipeline::new(seed * 104_729, concurrency);
            let got = churn(&mut p);
            for (step, (got, want)) in got.iter().zip(&want).enumerate() {
                assert_eq!(got, want, "seed {seed}, concurrency {concurrency}, step {step}");
            }
            conflicts += p.conflicts;
            assert!(p.repeats > 0, "weak notifications were delivered twice");
        }
    }
    assert!(conflicts > 0);
}
