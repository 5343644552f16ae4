//! The incremental pipeline reaches the batch result: the four observers, driven natively on a
//! `MemStore` the way the host drives them, end with exactly the tables that
//! `webindex::batch::compute` derives from the final `raw:*` inputs — whatever the order in
//! which inputs arrive and runs interleave.
//!
//! The driver imitates the host: every committed write of a strongly bound column of `pages`,
//! and every committed weak notification (`link:dirty`, `export:dirty`), queues a notification
//! of its binding's observer (pending notifications of one cell collapse into one, but one weak
//! notification in four is queued a second time: the host may deliver weak ones more than
//! once); a run begins a transaction after the commit that caused it, and up to six runs are in
//! flight at once (preferably on rows the others touch), so their snapshots overlap and their
//! commits race; a strong run of a cell whose newer run committed since it began fails as the
//! host's ack conflict would (weak bindings have no ack: their runs serialize on the columns
//! they always write, invariant 3 of the specification); a failed commit queues the
//! notification again. Input records (first crawls, then re-crawls of the same URL, and a few
//! deletions) are loaded in a random order interleaved with the runs.
//!
//! Run with `cargo test -p webindex --test fixed_point` in `guest-examples/`.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use percolator_guest::mem::{MemStore, MemTxn};
use percolator_guest::{Cell, Notification, Observer, Result, Txn};
use webindex::batch::{self, Inputs, Table, Tables};
use webindex::crawl::{self, Crawl, Rng, Shape};
use webindex::observers::{Clustering, DocumentProcessor, Exporter, LinkInversion};
use webindex::schema::*;

/// Every table the pipeline writes (`pending` is empty at the fixed point).
const TABLES: [&str; 5] = [PAGES, CLUSTERS, INLINKS, PENDING, INDEX];
/// The weak-notify columns (`notify = "weak"` in config/web-index.toml): never written.
const WEAK: [(&str, &str); 2] = [(PENDING, LINK_DIRTY), (PAGES, EXPORT_DIRTY)];
/// Runs after which the driver gives up: the pipeline does not settle.
const MAX_RUNS: usize = 500_000;

/// The observers, as the host's configuration binds them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Bound {
    DocumentProcessor,
    Clustering,
    LinkInversion,
    Exporter,
}

impl Bound {
    /// The observer bound to `table`/`column`, if any (config/web-index.toml).
    fn of(table: &str, column: &str) -> Option<Bound> {
        match (table, column) {
            (PAGES, RAW_HTML) => Some(Bound::DocumentProcessor),
            (PAGES, DOC_HASH | RAW_PAGERANK) => Some(Bound::Clustering),
            (PAGES, DOC_LINKS | CLUSTER_CANONICAL) | (PENDING, LINK_DIRTY) => Some(Bound::LinkInversion),
            (PAGES, EXPORT_DIRTY) => Some(Bound::Exporter),
            _ => None,
        }
    }

    /// Is `table`/`column` bound weakly?
    fn weak(cell: &Cell) -> bool {
        WEAK.contains(&(cell.table.as_str(), cell.column.as_str()))
    }

    fn observe(self, txn: &mut MemTxn, n: &Notification) -> Result<()> {
        match self {
            Bound::DocumentProcessor => DocumentProcessor::observe(txn, n),
            Bound::Clustering => Clustering::observe(txn, n),
            Bound::LinkInversion => LinkInversion::observe(txn, n),
            Bound::Exporter => Exporter::observe(txn, n),
        }
    }
}

/// One record the loader writes: each column set (`Some`) or deleted (`None`); `raw:html`
/// is left alone when `html` is `Keep`.
#[derive(Clone, Debug)]
struct Record {
    url: String,
    html: Change,
    pagerank: Change,
}

#[derive(Clone, Debug)]
enum Change {
    Keep,
    Set(Vec<u8>),
    Delete,
}

/// The input records of a crawl, per URL in the order they must be loaded (first crawl, then
/// re-crawls), plus, with `deletions`, a few records that delete `raw:html` or
/// `raw:pagerank` (a page gone, a rank withdrawn).
fn records(crawl: &Crawl, rng: &mut Rng, deletions: bool) -> BTreeMap<String, VecDeque<Record>> {
    let mut per_url: BTreeMap<String, VecDeque<Record>> = BTreeMap::new();
    for page in crawl.pages.iter().chain(&crawl.recrawls) {
        per_url.entry(page.url.clone()).or_default().push_back(Record {
            url: page.url.clone(),
            html: Change::Set(page.html.clone().into_bytes()),
            pagerank: Change::Set(format!("{}", page.pagerank).into_bytes()),
        });
    }
    if deletions {
        for (url, list) in per_url.iter_mut() {
            let (html, pagerank) = match rng.below(100) {
                0..4 => (Change::Delete, Change::Keep),
                4..8 => (Change::Keep, Change::Delete),
                8..10 => (Change::Delete, Change::Delete),
                _ => continue,
            };
            list.push_back(Record { url: url.clone(), html, pagerank });
        }
    }
    per_url
}

/// The `raw:*` inputs after every record is loaded.
fn final_inputs(records: &BTreeMap<String, VecDeque<Record>>) -> Inputs {
    let mut inputs = Inputs::new();
    for r in records.values().flatten() {
        let (html, pagerank) = inputs.entry(r.url.clone()).or_default();
        for (change, value) in [(&r.html, html), (&r.pagerank, pagerank)] {
            match change {
                Change::Keep => {}
                Change::Set(v) => *value = Some(v.clone()),
                Change::Delete => *value = None,
            }
        }
    }
    inputs
}

/// How the driver schedules.
#[derive(Clone, Copy, Debug)]
struct Schedule {
    /// Seeds the order of loads and runs.
    seed: u64,
    /// Most runs in flight at once (1: one run at a time).
    in_flight: usize,
    /// Also load records that delete inputs.
    deletions: bool,
}

/// A run begun and observed, waiting to commit.
struct Run {
    cell: Cell,
    bound: Bound,
    attempt: u32,
    txn: MemTxn,
}

/// What a drive did, for sanity checks.
#[derive(Debug, Default)]
struct Stats {
    runs: usize,
    /// Runs of weak notifications.
    weak_runs: usize,
    /// Weak notifications queued a second time.
    repeats: usize,
    /// Runs that failed on their ack (a newer run of the same notification committed first).
    ack_conflicts: usize,
    /// Runs whose commit failed on a write-write conflict.
    write_conflicts: usize,
    /// Bytes the committed runs wrote: row key, column and value of every cell set, row key
    /// and column of every cell deleted; `fwd:to` values apart.
    bytes: usize,
    /// Bytes of the `fwd:to` values written: a target's summary, which holds a count per
    /// distinct term of its inlinks' anchors.
    summary_bytes: usize,
}

/// The host, in miniature.
struct Driver {
    store: MemStore,
    rng: Rng,
    /// Notified cells not yet run, with the attempt of their next run.
    queue: Vec<(Cell, u32)>,
    /// The cells in `queue`: notifications of one cell collapse.
    queued: BTreeSet<Cell>,
    /// Runs begun and not yet committed.
    running: Vec<Run>,
    /// Commit timestamp of the newest committed run of each strongly bound cell: the host's
    /// ack, which an overlapping run of the same binding and row conflicts on.
    acks: BTreeMap<Cell, u64>,
    /// Deliver one weak notification in four a second time.
    repeats: bool,
    stats: Stats,
}

impl Driver {
    fn new(seed: u64) -> Driver {
        let store = MemStore::new();
        for (table, column) in WEAK {
            store.bind_weak(table, column);
        }
        Driver {
            store,
            rng: Rng(seed),
            queue: Vec::new(),
            queued: BTreeSet::new(),
            running: Vec::new(),
            acks: BTreeMap::new(),
            repeats: true,
            stats: Stats::default(),
        }
    }

    fn enqueue(&mut self, cell: Cell, attempt: u32) {
        if Bound::of(&cell.table, &cell.column).is_some() && self.queued.insert(cell.clone()) {
            self.queue.push((cell, attempt));
        }
    }

    /// Commits `txn` and queues notifications of the bound cells it wrote and of the weak
    /// notifications it sent, some of the latter twice.
    fn commit(&mut self, txn: MemTxn) -> Result<u64> {
        let written: Vec<Cell> = txn.buffered().keys().cloned().collect();
        let notified: Vec<Cell> = txn.buffered_weak().iter().cloned().collect();
        assert!(written.iter().all(|c| !Bound::weak(c)), "weak-notify columns are never written");
        let summary = |c: &Cell| c.table == PAGES && c.column == FWD_TO;
        let value_bytes = |c: &Cell, v: &Option<Vec<u8>>| if summary(c) { 0 } else { v.as_ref().map_or(0, Vec::len) };
        let bytes: usize = txn.buffered().iter().map(|(c, v)| c.row.len() + c.column.len() + value_bytes(c, v)).sum();
        let summary_bytes: usize =
            txn.buffered().iter().filter(|(c, _)| summary(c)).map(|(_, v)| v.as_ref().map_or(0, Vec::len)).sum();
        let ts = txn.commit()?;
        self.stats.bytes += bytes;
        self.stats.summary_bytes += summary_bytes;
        for cell in written {
            self.enqueue(cell, 1);
        }
        for cell in notified {
            if self.repeats && self.rng.below(4) == 0 {
                // A second delivery, outside the collapsing: it may run concurrently with the
                // first, or after it as a repeat.
                self.stats.repeats += 1;
                self.queue.push((cell.clone(), 1));
            }
            self.enqueue(cell, 1);
        }
        Ok(ts)
    }

    fn load(&mut self, r: &Record) {
        let mut txn = self.store.begin();
        for (column, change) in [(RAW_HTML, &r.html), (RAW_PAGERANK, &r.pagerank)] {
            match change {
                Change::Keep => Ok(()),
                Change::Set(v) => txn.set(PAGES, r.url.as_bytes(), column, v),
                Change::Delete => txn.delete(PAGES, r.url.as_bytes(), column),
            }
            .expect("the loader's write is valid");
        }
        self.commit(txn).expect("nobody else writes raw:*");
    }

    /// Takes a random queued notification and runs its observer in a new transaction, which
    /// stays in flight until [`finish`](Driver::finish). Half of the time while other runs are
    /// in flight, it prefers a notification of a row they run on or write to, where conflicts
    /// and lost updates would be; a quarter of the time, one of a page on a site whose
    /// forwarding runs, or the forwarding of a site of a page they run on or write to.
    fn begin(&mut self) {
        let mut pick = self.rng.below(self.queue.len());
        let coin = if self.running.is_empty() { 3 } else { self.rng.below(4) };
        if coin < 3 {
            let site_of = |row: &[u8]| site(std::str::from_utf8(row).unwrap()).as_bytes().to_vec();
            let mut hot: BTreeSet<(&str, Vec<u8>)> = BTreeSet::new();
            for c in self.running.iter().flat_map(|r| std::iter::once(&r.cell).chain(r.txn.buffered().keys())) {
                if c.table == PAGES {
                    hot.insert((PAGES, c.row.clone()));
                    hot.insert((PENDING, site_of(&c.row)));
                } else if Bound::weak(c) {
                    hot.insert((PENDING, c.row.clone()));
                }
            }
            let near: Vec<usize> = (0..self.queue.len())
                .filter(|&i| {
                    let c = &self.queue[i].0;
                    match (coin, c.table.as_str()) {
                        (0 | 1, PAGES) => hot.contains(&(PAGES, c.row.clone())),
                        (2, PAGES) => hot.contains(&(PENDING, site_of(&c.row))),
                        (2, _) => hot.contains(&(PENDING, c.row.clone())),
                        _ => false,
                    }
                })
                .collect();
            if !near.is_empty() {
                pick = near[self.rng.below(near.len())];
            }
        }
        let (cell, attempt) = self.queue.swap_remove(pick);
        self.run(cell, attempt);
    }

    /// Begins a run of the notification of `cell`, taken off the queue.
    fn run(&mut self, cell: Cell, attempt: u32) {
        self.queued.remove(&cell);
        let bound = Bound::of(&cell.table, &cell.column).expect("only bound cells are queued");
        let n = if Bound::weak(&cell) {
            self.stats.weak_runs += 1;
            Notification::weak(cell.clone())
        } else {
            self.store.notification(&cell.table, &cell.row, &cell.column)
        }
        .with_attempt(attempt);
        let mut txn = self.store.begin();
        self.stats.runs += 1;
        match bound.observe(&mut txn, &n) {
            Ok(()) => self.running.push(Run { cell, bound, attempt, txn }),
            Err(e) if e.is_conflict() => self.retry(cell, attempt),
            Err(e) => {
                panic!("{bound:?} failed on {}/{}/{}: {e}", cell.table, String::from_utf8_lossy(&cell.row), cell.column)
            }
        }
    }

    /// Commits a random run in flight (or fails it on its ack, or on a write-write conflict).
    fn finish(&mut self) {
        let run = self.running.swap_remove(self.rng.below(self.running.len()));
        if self.acks.get(&run.cell).is_some_and(|&ack| ack > run.txn.start_ts()) {
            self.stats.ack_conflicts += 1;
            return self.retry(run.cell, run.attempt);
        }
        match self.commit(run.txn) {
            Ok(ts) => {
                if !Bound::weak(&run.cell) {
                    self.acks.insert(run.cell, ts);
                }
            }
            Err(e) if e.is_conflict() => {
                self.stats.write_conflicts += 1;
                self.retry(run.cell, run.attempt);
            }
            Err(e) => panic!("{:?} commit failed: {e}", run.bound),
        }
    }

    fn retry(&mut self, cell: Cell, attempt: u32) {
        self.enqueue(cell, attempt + 1);
    }

    /// Loads every record (each URL's in order, URLs interleaved at random) while running
    /// observers, then runs them until no notification is left.
    fn drive(&mut self, mut records: BTreeMap<String, VecDeque<Record>>, in_flight: usize) {
        let mut urls: Vec<String> = records.keys().cloned().collect();
        loop {
            assert!(self.stats.runs < MAX_RUNS, "no fixed point after {MAX_RUNS} runs");
            let can_load = !urls.is_empty();
            let can_begin = !self.queue.is_empty() && self.running.len() < in_flight;
            let can_finish = !self.running.is_empty();
            // Weights: load 1, begin 4, finish 2 (among what is possible).
            let weights = [usize::from(can_load), 4 * usize::from(can_begin), 2 * usize::from(can_finish)];
            let total: usize = weights.iter().sum();
            if total == 0 {
                break;
            }
            let mut roll = self.rng.below(total);
            let mut action = 0;
            while roll >= weights[action] {
                roll -= weights[action];
                action += 1;
            }
            match action {
                0 => {
                    let k = self.rng.below(urls.len());
                    let list = records.get_mut(&urls[k]).expect("listed");
                    let record = list.pop_front().expect("URLs with records only");
                    if list.is_empty() {
                        urls.swap_remove(k);
                    }
                    self.load(&record);
                }
                1 => self.begin(),
                _ => self.finish(),
            }
        }
    }

    /// Writes `html` as `url`'s `raw:html`, then runs the notifications one at a time, oldest
    /// first, each committed before the next begins, until none is left: the same state gives
    /// the same runs. Returns the runs and the bytes they wrote.
    fn update(&mut self, url: &str, html: &str) -> (usize, usize, usize) {
        assert!(self.running.is_empty() && self.queue.is_empty(), "at a fixed point");
        let (runs, bytes, summary_bytes) = (self.stats.runs, self.stats.bytes, self.stats.summary_bytes);
        let record =
            Record { url: url.to_owned(), html: Change::Set(html.as_bytes().to_vec()), pagerank: Change::Keep };
        self.load(&record);
        while !self.queue.is_empty() {
            let (cell, attempt) = self.queue.remove(0);
            self.run(cell, attempt);
            if !self.running.is_empty() {
                self.finish();
            }
        }
        (self.stats.runs - runs, self.stats.bytes - bytes, self.stats.summary_bytes - summary_bytes)
    }

    /// Every table's cells; tables without cells absent. (The trigger columns hold no values:
    /// they are weak-notify.)
    fn tables(&self) -> Tables {
        let mut tables = Tables::new();
        for name in TABLES {
            let table: Table = self.store.cells(name).into_iter().map(|(c, v)| ((c.row, c.column), v)).collect();
            tables.insert(name.to_owned(), table);
        }
        batch::normalize(&mut tables);
        tables
    }
}

/// Drives the pipeline over `crawl` and returns the final tables, the final inputs and stats.
fn run(crawl: &Crawl, schedule: Schedule) -> (Tables, Inputs, Stats) {
    let mut rng = Rng(!schedule.seed);
    run_records(records(crawl, &mut rng, schedule.deletions), schedule)
}

/// Drives the pipeline over `records` (`schedule.deletions` is not used).
fn run_records(records: BTreeMap<String, VecDeque<Record>>, schedule: Schedule) -> (Tables, Inputs, Stats) {
    let mut driver = Driver::new(schedule.seed);
    let inputs = final_inputs(&records);
    driver.drive(records, schedule.in_flight);
    assert!(driver.running.is_empty() && driver.queue.is_empty());
    let tables = driver.tables();
    (tables, inputs, driver.stats)
}

/// Panics with the first differences if `actual` is not `expected`.
fn assert_same(expected: &Tables, actual: &Tables, what: &str) {
    let lines = batch::diff(expected, actual, 25);
    assert!(lines.is_empty(), "{what}: the tables differ:\n  {}", lines.join("\n  "));
}

#[test]
fn incremental_result_equals_the_batch_result() {
    let (mut ack_conflicts, mut write_conflicts) = (0, 0);
    for seed in 0..8 {
        let crawl = crawl::generate(seed, 120);
        let in_flight = [1, 2, 3, 6][seed as usize % 4];
        let schedule = Schedule { seed: seed * 7919 + 1, in_flight, deletions: seed % 2 == 1 };
        let (actual, inputs, stats) = run(&crawl, schedule);
        let expected = batch::compute(&inputs).expect("generated inputs are valid");
        assert_same(&expected, &actual, &format!("crawl seed {seed}, {schedule:?}"));
        assert!(stats.runs > 500 && stats.weak_runs > 100 && stats.repeats > 10, "{stats:?}");
        ack_conflicts += stats.ack_conflicts;
        write_conflicts += stats.write_conflicts;
    }
    assert!(
        ack_conflicts > 0 && write_conflicts > 0,
        "overlapping runs conflicted: {ack_conflicts} on acks, {write_conflicts} on writes"
    );
}

#[test]
fn the_order_of_loading_and_running_does_not_matter() {
    let crawl = crawl::generate(42, 120);
    let (first, inputs, _) = run(&crawl, Schedule { seed: 1, in_flight: 6, deletions: false });
    let (second, _, _) = run(&crawl, Schedule { seed: 2, in_flight: 2, deletions: false });
    assert_same(&first, &second, "two shuffles of one crawl");
    assert_eq!(inputs, crawl.inputs());
    let expected = batch::compute(&inputs).expect("generated inputs are valid");
    assert_same(&expected, &first, "crawl seed 42");
    for table in TABLES.into_iter().filter(|t| *t != PENDING) {
        assert!(expected.get(table).is_some_and(|t| !t.is_empty()), "{table} is exercised");
    }
}

#[test]
fn a_hub_crawl_reaches_the_batch_result() {
    for seed in 0..4 {
        let crawl = crawl::generate_shaped(seed, 150, Shape::Hubs);
        let schedule =
            Schedule { seed: seed * 104_729 + 3, in_flight: [2, 6][seed as usize % 2], deletions: seed >= 2 };
        let (actual, inputs, stats) = run(&crawl, schedule);
        let expected = batch::compute(&inputs).expect("generated inputs are valid");
        assert_same(&expected, &actual, &format!("hub crawl seed {seed}, {schedule:?}"));
        assert!(stats.write_conflicts > 0, "{stats:?}");
    }
}

/// A page that links to the crawl's first hub, which the generator never makes.
const PROBE: &str = "http://probe.example/leaf.html";

/// The hub's HTML, version `v`: the same size whatever the crawl.
fn hub_html(v: u32) -> String {
    format!(
        "<title>Documentation hub {v}</title><p>Version {v} of the index of every guide and reference.</p>\
         <a href=\"/guide/v{v}.html\">Guide {v}</a> <a href=\"http://probe.example/\">Probe home</a>"
    )
}

/// The probe page's HTML, version `v`: a link to `hub` with an anchor that changes.
fn probe_html(hub: &str, v: u32) -> String {
    format!(
        "<title>Probe {v}</title><p>A leaf page about storage engines, version {v}.</p>\
         <a href=\"{hub}\">storage guide {v}</a> <a href=\"/\">home</a>"
    )
}

/// Observer runs, bytes written and `fwd:to` bytes written by one update of the crawl's first
/// hub and one of a leaf page linking to it, in a hub crawl of `pages` pages at its fixed
/// point; and the size of the hub's summary.
fn update_costs(pages: usize) -> ([(usize, usize, usize); 2], usize) {
    let crawl = crawl::generate_shaped(7, pages, Shape::Hubs);
    let hub = crawl.pages[0].url.clone();
    let mut records = records(&crawl, &mut Rng(1), false);
    let probe =
        Record { url: PROBE.to_owned(), html: Change::Set(probe_html(&hub, 0).into_bytes()), pagerank: Change::Keep };
    records.insert(PROBE.to_owned(), [probe].into());
    let mut driver = Driver::new(11);
    driver.drive(records, 3);
    driver.repeats = false;
    // First versions of our own, so that the measured updates change the same bytes.
    driver.update(&hub, &hub_html(1));
    driver.update(PROBE, &probe_html(&hub, 1));
    let inlinks = driver
        .store
        .cells(INLINKS)
        .into_iter()
        .filter(|(c, _)| c.row.starts_with(format!("{hub} ").as_bytes()))
        .count();
    assert!(inlinks > pages / 2, "{hub} has {inlinks} inlinks of {pages} pages");
    let costs = [driver.update(&hub, &hub_html(2)), driver.update(PROBE, &probe_html(&hub, 2))];
    let mut inputs = crawl.inputs();
    inputs.insert(hub.clone(), (Some(hub_html(2).into_bytes()), inputs[&hub].1.clone()));
    inputs.insert(PROBE.to_owned(), (Some(probe_html(&hub, 2).into_bytes()), None));
    assert_same(&batch::compute(&inputs).unwrap(), &driver.tables(), &format!("hub crawl of {pages} pages, updated"));
    (costs, driver.store.get(PAGES, &hub, FWD_TO).unwrap().len())
}

#[test]
fn an_update_of_a_hub_or_a_leaf_costs_the_same_whatever_the_hub_inlinks() {
    let (small, small_summary) = update_costs(200);
    let (large, large_summary) = update_costs(400);
    for (what, (s, l)) in ["hub", "leaf"].into_iter().zip(small.into_iter().zip(large)) {
        eprintln!("{what} update: 200 pages {s:?}, 400 pages {l:?} (runs, bytes, summary bytes)");
        assert_eq!(s.0, l.0, "{what} update: observer runs");
        // Row keys hold the hub's URL, which may be a digit longer in the larger crawl.
        assert!(l.1.abs_diff(s.1) <= 32, "{what} update: {} bytes with 200 pages, {} with 400", s.1, l.1);
        assert!(s.1 < 4_000, "{what} update: {} bytes", s.1);
    }
    // The leaf's new anchor changes the hub's summary, written once: its size follows the
    // distinct terms of the hub's anchors (and the digits of their counts), not its inlinks.
    eprintln!("hub's summary: {small_summary} bytes (200 pages), {large_summary} (400 pages)");
    assert_eq!((small[1].2, large[1].2), (small_summary, large_summary));
    assert!(large_summary < 1_000, "{large_summary} bytes");
}

#[test]
fn an_unparsable_pagerank_fails_the_clustering_run_naming_the_cell() {
    let url = "http://site1.example/a/page1.html";
    let inputs: Inputs =
        [(url.to_owned(), (Some(b"<title>T</title><p>x</p>".to_vec()), Some(b"lots".to_vec())))].into();
    assert!(batch::compute(&inputs).unwrap_err().contains(url));
    let store = MemStore::new();
    store.put(PAGES, url, RAW_HTML, "<title>T</title><p>x</p>");
    store.put(PAGES, url, RAW_PAGERANK, "lots");
    store.observe::<DocumentProcessor>(&store.notification(PAGES, url, RAW_HTML)).unwrap();
    let err = store.observe::<Clustering>(&store.notification(PAGES, url, RAW_PAGERANK)).unwrap_err();
    assert!(!err.is_conflict() && err.message().contains(url), "{err}");
}

#[test]
fn edge_cases_reach_the_batch_result() {
    const A: &str = "http://a.example/";
    const B: &str = "http://b.example/";
    const C: &str = "http://c.example/x.html";
    const D: &str = "http://d.example/";
    const E: &str = "http://e.example/";
    const F: &str = "http://f.example/";
    const G: &str = "http://g.example/latin1.html";
    const H: &str = "http://h.example/utf8.html";
    let set = |s: &str| Change::Set(s.as_bytes().to_vec());
    let links = |list: &[(&str, &str)]| -> String {
        list.iter().map(|(href, anchor)| format!("<a href=\"{href}\">{anchor}</a>\n")).collect()
    };
    let c_first = format!(
        "<title>Links</title><p>to everything</p>{}",
        links(&[(A, ""), (B, "beta"), (B, ""), (B, "bravo"), ("/x.html", "self"), ("http://gone.example/", "gone")])
    );
    let c_last =
        format!("<title>Links</title>{}", links(&[(D, "delta"), (E, "echo"), ("http://gone.example/", "gone again")]));
    let e_html = format!("<title>  </title><script>var x = 1;</script>{}", links(&[(F, "foxtrot")]));
    let raw: Vec<(&str, Change, Change)> = vec![
        // Two empty pages: one cluster, tied at PageRank 0 (absent and "0"): A is canonical,
        // and in the end it has no terms to export (C's links to A and B are gone).
        (A, set(""), Change::Keep),
        (B, set(""), set("0")),
        // C links with empty anchors, repeated targets, itself and an uncrawled page; its
        // PageRank is odd text; later it loses its page, then comes back with other links.
        (C, set(&c_first), set("2e-3")),
        (C, Change::Delete, Change::Keep),
        (C, set(&c_last), Change::Keep),
        // D has only a PageRank; E an empty title and a script; F comes and goes entirely.
        (D, Change::Keep, set("1")),
        (E, set(&e_html), set("0.5")),
        (F, set("<title>Gone soon</title>"), set("3")),
        (F, Change::Delete, Change::Delete),
        // B becomes the better canonical, then A overtakes it again with a tie and the URL.
        (B, Change::Keep, set("7")),
        (A, Change::Keep, set("7.0")),
        // The same page in windows-1252 (unlabelled) and in UTF-8: one cluster, H canonical.
        (G, Change::Set(b"<title>Caf\xe9</title><p>cr\xe8me <a href=\"/\">br\xfbl\xe9e</a>".to_vec()), set("1")),
        (H, set("<title>Café</title><p>crème <a href=\"/\">brûlée</a>"), set("2")),
    ];
    let mut records: BTreeMap<String, VecDeque<Record>> = BTreeMap::new();
    for (url, html, pagerank) in raw {
        records.entry(url.to_owned()).or_default().push_back(Record { url: url.to_owned(), html, pagerank });
    }
    let mut previous: Option<Tables> = None;
    for seed in 0..12 {
        let schedule = Schedule { seed, in_flight: 1 + seed as usize % 4, deletions: false };
        let (actual, inputs, _) = run_records(records.clone(), schedule);
        let expected = batch::compute(&inputs).expect("the inputs are valid");
        assert_same(&expected, &actual, &format!("edge cases, {schedule:?}"));
        let cell = |url: &str, column: &str| expected[PAGES].get(&(url.as_bytes().to_vec(), column.to_owned()));
        assert_eq!(cell(A, CLUSTER_CANONICAL).map(Vec::as_slice), Some(A.as_bytes()));
        assert_eq!(cell(A, EXPORT_TERMS), None);
        assert_eq!(cell(F, RAW_HTML), None);
        let f = format!("{F}\n1\nfoxtrot\t1\n");
        assert_eq!(cell(F, FWD_TO).map(Vec::as_slice), Some(f.as_bytes()), "E's link");
        assert_eq!(cell(G, DOC_TITLE).map(Vec::as_slice), Some("Café".as_bytes()));
        assert_eq!(cell(G, CLUSTER_CANONICAL).map(Vec::as_slice), Some(H.as_bytes()));
        if let Some(previous) = &previous {
            assert_same(previous, &actual, "edge cases, two schedules");
        }
        previous = Some(actual);
    }
}
