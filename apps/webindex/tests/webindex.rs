//! The web-index pipeline (`config/web-index.toml`, `docs/webindex.md`) with the real guest
//! components: incremental equals batch. A sample crawl with re-crawls (and a hub-shaped one)
//! is written in random order by concurrent writers while the pipeline runs; at its fixed point every table equals
//! `webindex::batch::compute` of the final inputs, value by value. The same again with the host
//! process killed (SIGKILL) and restarted mid-way, loading through the CLI; and on the Redis
//! backend, with three hosts serving one namespace and one of them killed mid-load.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use percolator_api::endpoint::Scan;
use percolator_api::{Remote, ScanRequest};
use percolator_runtime::Runtime;
use percolator_server::config::Config;
use percolator_server::pipeline::Pipeline;
use percolator_store::{ScannerConfig, Store, StoreConfig};
use webindex::batch::{self, Tables};
use webindex::crawl::{self, CrawlPage};
use webindex::schema;

/// URL → (`raw:html`, `raw:pagerank`): the batch computation's input.
type Inputs = BTreeMap<String, (Option<Vec<u8>>, Option<Vec<u8>>)>;

fn root() -> PathBuf {
    common::workspace()
}

#[path = "../../../host/tests/common/mod.rs"]
mod common;

/// A fresh temp dir holding an `observers/` folder with the pipeline's components and
/// `pipeline.toml`: the bindings of `config/web-index.toml` under a test header.
fn setup(name: &str, durability: &str, header_extra: &str) -> PathBuf {
    setup_with(name, durability, header_extra, &[])
}

/// [`setup`] with some components replaced: `(file, guest)`, e.g. the Python port of
/// clustering as `clustering.wasm`.
fn setup_with(name: &str, durability: &str, header_extra: &str, replaced: &[(&str, &str)]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("percolator-webindex-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("observers")).unwrap();
    for wasm in ["document_processor", "clustering", "link_inversion", "exporter"] {
        let src = common::guest(wasm);
        std::fs::copy(&src, dir.join("observers").join(format!("{wasm}.wasm"))).unwrap();
    }
    for (file, guest) in replaced {
        std::fs::copy(common::guest(guest), dir.join("observers").join(file)).unwrap();
    }
    let real = std::fs::read_to_string(root().join("config/web-index.toml")).unwrap();
    let bindings = &real[real.find("[[binding]]").expect("config/web-index.toml has bindings")..];
    std::fs::write(
        dir.join("pipeline.toml"),
        format!(
            "{}[observers]\ndir = \"observers\"\n{header_extra}\n{bindings}",
            common::store_section("store.redb", durability)
        ),
    )
    .unwrap();
    dir
}

/// Opens the store a test configuration names (redb, or the test's Redis namespace).
fn open_store(dir: &Path) -> Store {
    let config = Config::load(&dir.join("pipeline.toml")).unwrap();
    config.backend.open(&config.store_path, StoreConfig::default()).unwrap()
}

/// The crawl's records in a random order in which every re-crawl of a URL comes after its
/// first crawl (and after earlier re-crawls of it): the final version of each URL is the last
/// one in the crawl.
fn shuffled_records(crawl: &crawl::Crawl, seed: u64) -> Vec<CrawlPage> {
    let mut rng = crawl::Rng(seed);
    let mut out: Vec<CrawlPage> = crawl.pages.clone();
    for i in (1..out.len()).rev() {
        out.swap(i, rng.below(i + 1));
    }
    for r in &crawl.recrawls {
        let after = out.iter().rposition(|p| p.url == r.url).expect("re-crawl of a crawled URL");
        let at = after + 1 + rng.below(out.len() - after);
        out.insert(at, r.clone());
    }
    out
}

/// The final inputs: the last version of each URL, as the store holds them.
fn final_inputs(records: &[CrawlPage]) -> Inputs {
    let mut inputs = BTreeMap::new();
    for p in records {
        inputs.insert(p.url.clone(), (Some(p.html.clone().into_bytes()), Some(format!("{}", p.pagerank).into_bytes())));
    }
    inputs
}

/// Every user cell of the pipeline's tables, trigger columns excluded.
fn read_tables(store: &Store) -> Tables {
    let txn = store.begin().unwrap();
    let mut tables = Tables::new();
    for table in [schema::PAGES, schema::CLUSTERS, schema::INLINKS, schema::PENDING, schema::INDEX] {
        let cells: batch::Table = txn
            .scan(table, b"", None, None, usize::MAX)
            .unwrap()
            .into_iter()
            .filter(|e| e.column != schema::LINK_DIRTY && e.column != schema::EXPORT_DIRTY)
            .map(|e| ((e.row, e.column), e.value))
            .collect();
        tables.insert(table.to_owned(), cells);
    }
    batch::normalize(&mut tables);
    tables
}

fn assert_equals_batch(store: &Store, inputs: &Inputs) {
    let mut expected = batch::compute(inputs).unwrap();
    batch::normalize(&mut expected);
    let actual = read_tables(store);
    let diff = batch::diff(&expected, &actual, 20);
    assert!(diff.is_empty(), "incremental result differs from batch:\n{}", diff.join("\n"));
    let cells: usize = actual.values().map(|t| t.len()).sum();
    assert!(actual.get(schema::INDEX).is_some_and(|t| !t.is_empty()), "the index is empty");
    eprintln!("equal: {} tables, {cells} cells", actual.len());
}

#[test]
fn incremental_equals_batch_with_concurrent_writers_in_random_order() {
    concurrent_writers("inproc", &crawl::generate(11, 120));
}

/// The same with a crawl whose first pages are linked from most pages (`sample-crawl --shape
/// hubs`): many concurrent changes of one hub's inlinks.
#[test]
fn incremental_equals_batch_on_a_hub_crawl() {
    concurrent_writers("hubs", &crawl::generate_shaped(12, 200, crawl::Shape::Hubs));
}

/// The same with documentation sites (`sample-crawl --shape docs`): a navigation block on every
/// page of a site, pages of tens to hundreds of KB, mirror copies that an edit separates from
/// their original and a later re-crawl brings back.
#[test]
fn incremental_equals_batch_on_a_docs_crawl() {
    concurrent_writers("docs", &crawl::generate_shaped(13, 120, crawl::Shape::Docs));
}

/// The same with clustering written in Python (`guest-examples/python/clustering`, a port of
/// the Rust observer) bound in its place: the other language's observer writes the same cells.
#[test]
fn incremental_equals_batch_with_the_python_clustering() {
    concurrent_writers_with("python-clustering", &crawl::generate(13, 120), &[("clustering.wasm", "clustering_py")]);
}

/// And with clustering written in JavaScript (`guest-examples/js/clustering`).
#[test]
fn incremental_equals_batch_with_the_javascript_clustering() {
    concurrent_writers_with("js-clustering", &crawl::generate(14, 120), &[("clustering.wasm", "clustering_js")]);
}

/// Loads `crawl` with re-crawls, in random order, with three concurrent writers, into an
/// in-process host; at its fixed point the tables equal the batch computation's.
fn concurrent_writers(name: &str, crawl: &crawl::Crawl) {
    concurrent_writers_with(name, crawl, &[]);
}

fn concurrent_writers_with(name: &str, crawl: &crawl::Crawl, replaced: &[(&str, &str)]) {
    // The Python and JavaScript ports compile in the workspace's shared test cache, whose
    // function cache holds the interpreter's functions from the other Python or JavaScript tests
    // (a component compiled in it is verified by digest, so sharing is safe).
    let cache = if replaced.is_empty() {
        String::new()
    } else {
        format!("cache_dir = {:?}\n", common::shared_cache_dir().display().to_string())
    };
    let dir = setup_with(name, "none", &cache, replaced);
    let config = Config::load(&dir.join("pipeline.toml")).unwrap();
    let store = open_store(&dir);
    let pipeline = Arc::new(Pipeline::new(store.clone(), Runtime::new(Some(config.cache_dir.clone())).unwrap()));
    pipeline.apply(&config).unwrap();
    let scanner = store.start_scanner(ScannerConfig { threads: 2, ..ScannerConfig::default() });

    let records = shuffled_records(crawl, 5);
    // Three writers; each writes its share of the records in order (a URL's versions all go to
    // one writer, so the last version written is the last in `records`).
    let writers = 3;
    std::thread::scope(|s| {
        for w in 0..writers {
            let (store, records) = (&store, &records);
            s.spawn(move || {
                for p in records
                    .iter()
                    .filter(|p| (p.url.len() + p.url.bytes().map(usize::from).sum::<usize>()) % writers == w)
                {
                    store
                        .run(|txn| {
                            txn.set(schema::PAGES, &p.url, schema::RAW_HTML, p.html.as_bytes())?;
                            txn.set(schema::PAGES, &p.url, schema::RAW_PAGERANK, format!("{}", p.pagerank))
                        })
                        .unwrap();
                }
            });
        }
    });
    assert!(store.wait_quiescent(Duration::from_secs(300)).unwrap(), "the pipeline did not reach its fixed point");
    scanner.stop();
    let m = store.metrics();
    assert_eq!(m.dead_letters, 0, "dead letters: {:?}", store.dead_letters().unwrap());
    eprintln!("observer runs {}, conflicts {}, commits {}", m.observer_runs, m.conflicts, m.commits);
    assert_equals_batch(&store, &final_inputs(&records));
    drop(pipeline);
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A `percolator up` child, killed on drop.
struct HostProcess {
    child: Child,
}

impl HostProcess {
    fn start(dir: &Path) -> HostProcess {
        let _ = std::fs::remove_file(dir.join("store.redb.endpoint"));
        let log = std::fs::File::create(dir.join("host.log")).unwrap();
        let child = Command::new(common::percolator_bin())
            .arg("up")
            .arg(dir.join("pipeline.toml"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(120);
        while !dir.join("store.redb.endpoint").is_file() {
            assert!(Instant::now() < deadline, "host did not start: {}", read_log(dir));
            std::thread::sleep(Duration::from_millis(50));
        }
        HostProcess { child }
    }

    fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM and wait: a clean stop.
    fn stop(mut self) {
        let _ = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
        let _ = self.child.wait();
    }
}

impl Drop for HostProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn read_log(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("host.log")).unwrap_or_default()
}

fn percolator(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new(common::percolator_bin()).arg("--config").arg(dir.join("pipeline.toml")).args(args).output().unwrap()
}

fn write_jsonl(path: &Path, records: &[CrawlPage]) {
    let mut out = String::new();
    for p in records {
        out.push_str(&serde_json::json!({"url": p.url, "html": p.html, "pagerank": p.pagerank}).to_string());
        out.push('\n');
    }
    std::fs::write(path, out).unwrap();
}

#[test]
fn incremental_equals_batch_across_host_kills_mid_load() {
    // fsync: with durability "none" a killed process loses its recent commits, by design.
    let dir = setup("killed", "fsync", "[http]\nlisten = \"127.0.0.1:0\"\n");
    let crawl = crawl::generate(23, 150);
    let records = shuffled_records(&crawl, 9);
    // Three files loaded one after another; the host is killed during the loads of the first
    // two and once more after each of them was loaded.
    let parts: Vec<&[CrawlPage]> = records.chunks(records.len().div_ceil(3)).collect();
    for (i, part) in parts.iter().enumerate() {
        write_jsonl(&dir.join(format!("part{i}.jsonl")), part);
    }
    for i in 0..parts.len() {
        let file = dir.join(format!("part{i}.jsonl"));
        let file = file.to_str().unwrap();
        let load_args = ["load", "pages", file, "--key", "url", "--batch", "4"];
        if i + 1 < parts.len() {
            // Kill the host while the load is running (and the pipeline busy with it); the load
            // fails or finishes; after a restart the same command resumes from its checkpoint.
            let host = HostProcess::start(&dir);
            // Wait until a few records are in, then kill the host under the running load.
            let endpoint = std::fs::read_to_string(dir.join("store.redb.endpoint")).unwrap();
            let api = Remote::new(endpoint.trim(), None);
            let scan = ScanRequest {
                table: "_loads".into(),
                columns: Some(vec!["load:lines".into()]),
                limit: 100,
                ..Default::default()
            };
            // Progress of this load: the checkpoint row that earlier loads did not have.
            let rows = |api: &Remote| -> Vec<(String, usize)> {
                api.call::<Scan>(&scan)
                    .map(|r| r.cells.iter().map(|c| (c.row.clone(), c.value.parse().unwrap_or(0))).collect())
                    .unwrap_or_default()
            };
            let earlier: Vec<String> = rows(&api).into_iter().map(|(row, _)| row).collect();
            let load = Command::new(common::percolator_bin())
                .arg("--config")
                .arg(dir.join("pipeline.toml"))
                .args(["load", "pages", file, "--key", "url", "--batch", "1"])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let deadline = Instant::now() + Duration::from_secs(120);
            loop {
                let done =
                    rows(&api).into_iter().filter(|(row, _)| !earlier.contains(row)).map(|(_, n)| n).max().unwrap_or(0);
                if done >= 3 {
                    break;
                }
                assert!(Instant::now() < deadline, "the load made no progress: {}", read_log(&dir));
                std::thread::sleep(Duration::from_millis(1));
            }
            host.kill();
            let output = load.wait_with_output().unwrap();
            assert!(
                !output.status.success(),
                "the load finished before the host was killed (the test proves nothing): {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        let host = HostProcess::start(&dir);
        let load = percolator(&dir, &load_args);
        assert!(load.status.success(), "load failed: {}", String::from_utf8_lossy(&load.stderr));
        if i + 1 == parts.len() {
            let wait = percolator(&dir, &["wait", "--timeout", "300"]);
            assert!(wait.status.success(), "no fixed point: {}", read_log(&dir));
            let status = percolator(&dir, &["status"]);
            eprintln!("{}", String::from_utf8_lossy(&status.stdout));
            host.stop();
        } else {
            std::thread::sleep(Duration::from_millis(200));
            host.kill();
        }
    }
    // Reopen the store directly and compare.
    let store = open_store(&dir);
    assert!(store.dead_letters().unwrap().is_empty(), "dead letters: {:?}", store.dead_letters().unwrap());
    assert!(store.pending_notifications(1).unwrap().is_empty(), "notifications left pending");
    assert_equals_batch(&store, &final_inputs(&records));
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The distributed mode: three `percolator up` hosts on one Redis namespace (each with its own
/// folder and endpoint, all with the same configuration), the crawl loaded through the first,
/// the second SIGKILLed mid-load (its share of the notify buckets passes to the others when
/// its etcd lease expires, its locks are resolved by the others): the tables equal the batch
/// computation's. Runs only on the Redis backend with the oracle service (`scripts/test`).
#[test]
fn incremental_equals_batch_on_three_hosts_with_one_killed() {
    if std::env::var("PERCOLATOR_TEST_BACKEND").as_deref() != Ok("redis") {
        return;
    }
    assert!(std::env::var("PERCOLATOR_ETCD").is_ok(), "the three hosts need the oracle service: PERCOLATOR_ETCD");
    let first = setup("three-0", "fsync", "[http]\nlisten = \"127.0.0.1:0\"\n");
    // The same configuration (and so the same namespace) in each host's own folder.
    let dirs: Vec<PathBuf> = std::iter::once(first.clone())
        .chain((1..3).map(|i| {
            let dir = std::env::temp_dir().join(format!("percolator-webindex-three-{i}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(dir.join("observers")).unwrap();
            for e in std::fs::read_dir(first.join("observers")).unwrap() {
                let e = e.unwrap();
                std::fs::copy(e.path(), dir.join("observers").join(e.file_name())).unwrap();
            }
            std::fs::copy(first.join("pipeline.toml"), dir.join("pipeline.toml")).unwrap();
            dir
        }))
        .collect();
    let mut hosts: Vec<Option<HostProcess>> = dirs.iter().map(|d| Some(HostProcess::start(d))).collect();
    let crawl = crawl::generate(31, 150);
    let records = shuffled_records(&crawl, 13);
    let file = first.join("crawl.jsonl");
    write_jsonl(&file, &records);
    let mut load = Command::new(common::percolator_bin())
        .arg("--config")
        .arg(first.join("pipeline.toml"))
        .args(["load", "pages", file.to_str().unwrap(), "--key", "url", "--batch", "2"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Kill the second host once the pipeline is busy with the load.
    let endpoint = std::fs::read_to_string(first.join("store.redb.endpoint")).unwrap();
    let api = Remote::new(endpoint.trim(), None);
    let scan = ScanRequest { table: schema::PAGES.into(), limit: 40, ..Default::default() };
    let deadline = Instant::now() + Duration::from_secs(120);
    while api.call::<Scan>(&scan).map(|r| r.cells.len()).unwrap_or(0) < 40 {
        assert!(Instant::now() < deadline, "the load made no progress: {}", read_log(&first));
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(load.try_wait().unwrap().is_none(), "the load finished before the host was killed (proves nothing)");
    hosts[1].take().unwrap().kill();
    let output = load.wait_with_output().unwrap();
    assert!(output.status.success(), "the load failed: {}", String::from_utf8_lossy(&output.stderr));
    let wait = percolator(&first, &["wait", "--timeout", "300"]);
    assert!(wait.status.success(), "no fixed point: {}", read_log(&first));
    for h in hosts.iter_mut().filter_map(Option::take) {
        h.stop();
    }
    let store = open_store(&first);
    assert!(store.dead_letters().unwrap().is_empty(), "dead letters: {:?}", store.dead_letters().unwrap());
    assert!(store.pending_notifications(1).unwrap().is_empty(), "notifications left pending");
    assert_equals_batch(&store, &final_inputs(&records));
    drop(store);
    for d in &dirs {
        let _ = std::fs::remove_dir_all(d);
    }
}
