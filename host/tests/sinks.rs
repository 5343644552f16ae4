//! Sinks with real parts: `percolator up` as a child process delivering to a PostgreSQL 15
//! server of the test's own (Debian's binaries, `initdb` in a temp dir, 127.0.0.1, stopped by
//! PID), to a jsonl file, and to a webhook receiver inside the test (a std `TcpListener` that
//! answers 500, stalls past the timeout or hangs up on purpose). The host is SIGKILLed mid
//! delivery and PostgreSQL stopped during a load; the destination must end equal to the
//! store. Without PostgreSQL the PostgreSQL tests say so and pass, unless
//! `PERCOLATOR_REQUIRE_POSTGRES` is set (`scripts/test` sets it and installs the package).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use percolator_api::endpoint::SinkDeadLetter;
use percolator_api::{SinkDeadLetterAction, SinkDeadLetterRequest};
use percolator_server::sinks::postgres::PostgresSink;
use percolator_server::sinks::{Batch, Change, Deliver};
use percolator_store::{CellRef, Timestamp};

mod common;

/// A temp dir with `p.toml` and an empty observers folder; removed on drop.
struct Sandbox {
    dir: PathBuf,
}

impl Sandbox {
    fn new(name: &str, sinks: &str) -> Sandbox {
        Sandbox::with_store(name, "[store]\npath = \"store.redb\"\n", sinks)
    }

    /// With `store` as the `[store]` section (several sandboxes may share a Redis namespace).
    fn with_store(name: &str, store: &str, sinks: &str) -> Sandbox {
        let dir = std::env::temp_dir().join(format!("percolator-sinks-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("observers")).unwrap();
        std::fs::write(dir.join("store.toml"), store).unwrap();
        let sb = Sandbox { dir };
        sb.config(sinks);
        sb
    }

    fn config(&self, sinks: &str) {
        let store = std::fs::read_to_string(self.path("store.toml")).unwrap();
        std::fs::write(
            self.path("p.toml"),
            format!("{store}[observers]\ndir = \"observers\"\n[http]\nlisten = \"127.0.0.1:0\"\n{sinks}"),
        )
        .unwrap();
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn command(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_percolator"));
        c.current_dir(&self.dir)
            .env_remove("PERCOLATOR_TOKEN")
            .env_remove("PERCOLATOR_CONFIG")
            .env_remove("RUST_LOG")
            .arg("--config")
            .arg(self.path("p.toml"));
        c
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.command().args(args).output().unwrap();
        assert!(out.status.success(), "percolator {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    }

    /// Loads `records` (JSON lines) into table `docs` (a new load each time).
    fn load(&self, name: &str, records: &str) {
        std::fs::write(self.path(name), records).unwrap();
        self.ok(&["load", "docs", name]);
    }

    /// The store's `docs` table: row → column → value.
    fn store_state(&self) -> BTreeMap<String, BTreeMap<String, String>> {
        let mut out: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        for line in self.ok(&["scan", "docs", "--columns", "raw:text,raw:n", "--limit", "100000"]).lines() {
            let mut f = line.splitn(3, '\t');
            let (row, column, value) = (f.next().unwrap(), f.next().unwrap(), f.next().unwrap());
            out.entry(row.to_owned()).or_default().insert(column.to_owned(), value.to_owned());
        }
        out
    }

    fn status(&self) -> serde_json::Value {
        serde_json::from_str(&self.ok(&["status", "--json"])).unwrap()
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A `percolator up` child process: SIGTERM on drop, or SIGKILL on purpose.
struct Host {
    child: Option<Child>,
}

impl Host {
    fn start(sb: &Sandbox) -> Host {
        let endpoint = sb.path("store.redb.endpoint");
        let _ = std::fs::remove_file(&endpoint);
        let log = sb.path("host.log");
        let mut child = sb
            .command()
            .arg("up")
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::OpenOptions::new().create(true).append(true).open(&log).unwrap())
            .spawn()
            .unwrap();
        common::wait_for_endpoint(&mut child, &endpoint, &log);
        // The API answers first; the pipeline (and its sinks) once the first load is done.
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let out = sb.command().args(["status", "--json"]).output().unwrap();
            let loaded = serde_json::from_slice::<serde_json::Value>(&out.stdout)
                .is_ok_and(|s| s["host"]["generation"].as_u64().is_some_and(|g| g >= 1));
            if loaded {
                break;
            }
            if let Some(status) = child.try_wait().unwrap() {
                panic!("the host exited ({status}): {}", std::fs::read_to_string(&log).unwrap_or_default());
            }
            assert!(Instant::now() < deadline, "the host did not load: {}", std::fs::read_to_string(&log).unwrap());
            std::thread::sleep(Duration::from_millis(20));
        }
        Host { child: Some(child) }
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().unwrap(); // SIGKILL
            child.wait().unwrap();
        }
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        if let Some(child) = self.child.take() {
            common::stop_process(child);
        }
    }
}

fn wait_until<T>(what: &str, secs: u64, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out after {secs} s waiting until {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

// ---------------------------------------------------------------------------------------------
// PostgreSQL of the test's own.

/// A PostgreSQL server on 127.0.0.1 with a private data directory; stopped by PID on drop.
struct Postgres {
    bin: PathBuf,
    data: PathBuf,
    port: u16,
    child: Option<Child>,
    /// Run as user `postgres` (PostgreSQL refuses to run as root).
    as_postgres: bool,
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0").unwrap_or(false)
}

impl Postgres {
    /// Starts one, or returns `None` (saying why) when Debian's PostgreSQL is not installed
    /// and `PERCOLATOR_REQUIRE_POSTGRES` is not set.
    fn start(name: &str) -> Option<Postgres> {
        let bin = std::fs::read_dir("/usr/lib/postgresql").ok().and_then(|dirs| {
            let mut dirs: Vec<PathBuf> = dirs.flatten().map(|e| e.path().join("bin")).collect();
            dirs.sort();
            dirs.into_iter().rev().find(|d| d.join("postgres").exists() && d.join("initdb").exists())
        });
        let Some(bin) = bin else {
            assert!(
                std::env::var_os("PERCOLATOR_REQUIRE_POSTGRES").is_none(),
                "PERCOLATOR_REQUIRE_POSTGRES is set but PostgreSQL is not installed (/usr/lib/postgresql/*/bin): \
                 apt-get install -y postgresql"
            );
            eprintln!("SKIPPED: PostgreSQL is not installed (/usr/lib/postgresql/*/bin); apt-get install postgresql");
            return None;
        };
        let root = std::env::temp_dir().join(format!("percolator-sinks-pg-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let data = root.join("data");
        std::fs::create_dir_all(&data).unwrap();
        let as_postgres = is_root();
        if as_postgres {
            assert!(Command::new("chown").args(["-R", "postgres:postgres"]).arg(&root).status().unwrap().success());
        }
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut pg = Postgres { bin, data, port, child: None, as_postgres };
        let out = pg
            .command("initdb")
            .arg("-D")
            .arg(&pg.data)
            .args(["-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C"])
            .output()
            .unwrap();
        assert!(out.status.success(), "initdb failed: {}", String::from_utf8_lossy(&out.stderr));
        pg.run();
        Some(pg)
    }

    fn command(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        if self.as_postgres {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=postgres", "--regid=postgres", "--init-groups", "--"]).arg(path);
            c
        } else {
            Command::new(path)
        }
    }

    /// Starts the server (again) and waits until it answers.
    fn run(&mut self) {
        let log = self.data.parent().unwrap().join("pg.log");
        let child = self
            .command("postgres")
            .arg("-D")
            .arg(&self.data)
            .args(["-c", "listen_addresses=127.0.0.1", "-p", &self.port.to_string()])
            .arg("-c")
            .arg(format!("unix_socket_directories={}", self.data.display()))
            .args(["-c", "fsync=off"])
            .stdout(Stdio::null())
            .stderr(std::fs::OpenOptions::new().create(true).append(true).open(&log).unwrap())
            .spawn()
            .unwrap();
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        while postgres::Client::connect(&self.url(), postgres::NoTls).is_err() {
            assert!(Instant::now() < deadline, "PostgreSQL did not start: {}", std::fs::read_to_string(&log).unwrap());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Stops the server by its PID (fast shutdown: SIGINT) and waits for it to exit.
    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill").arg("-INT").arg(child.id().to_string()).status();
            let deadline = Instant::now() + Duration::from_secs(30);
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn url(&self) -> String {
        format!("postgresql://postgres@127.0.0.1:{}/postgres", self.port)
    }

    fn client(&self) -> postgres::Client {
        postgres::Client::connect(&self.url(), postgres::NoTls).unwrap()
    }

    /// The sink's table as row → column → value (cells with a value; tombstones left out),
    /// or `None` while it does not exist.
    fn table(&self, target: &str) -> Option<BTreeMap<String, BTreeMap<String, String>>> {
        let mut c = self.client();
        let rows = c.query(&format!("SELECT \"row\", raw_text, raw_n FROM {target}"), &[]).ok()?;
        let mut out: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        for r in rows {
            let row: String = r.get(0);
            for (i, column) in [(1, "raw:text"), (2, "raw:n")] {
                if let Some(v) = r.get::<_, Option<String>>(i) {
                    out.entry(row.clone()).or_default().insert(column.to_owned(), v);
                }
            }
        }
        Some(out)
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        self.stop();
        if let Some(root) = self.data.parent() {
            let _ = std::fs::remove_dir_all(root);
        }
    }
}

/// `n` records: row `r<i>` with `text` and `n`; every `delete_every`th has its `text` deleted
/// (null).
fn records(n: usize, round: usize, delete_every: usize) -> String {
    (0..n)
        .map(|i| {
            let text = if delete_every > 0 && i % delete_every == 0 {
                "null".to_owned()
            } else {
                format!("\"doc {i} round {round}\"")
            };
            format!("{{\"row\": \"r{i:04}\", \"text\": {text}, \"n\": {}}}\n", i * round)
        })
        .collect()
}

fn sinks_toml(pg_url: &str) -> String {
    format!(
        "[[sink]]\nname = \"pg\"\nkind = \"postgres\"\ntable = \"docs\"\ncolumns = [\"raw:text\", \"raw:n\"]\n\
         url = \"{pg_url}\"\ntarget = \"docs\"\nbatch = 40\n\n\
         [[sink]]\nname = \"file\"\nkind = \"jsonl\"\ntable = \"docs\"\ncolumns = [\"raw:text\", \"raw:n\"]\npath = \"out/changes.jsonl\"\n"
    )
}

/// The jsonl file folded: lines deduplicated by (row, column, commit_ts), applied in commit
/// order. Also checks that every line is whole JSON.
fn fold_jsonl(path: &Path) -> BTreeMap<String, BTreeMap<String, String>> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut changes: BTreeMap<(u64, String, String), Option<String>> = BTreeMap::new();
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
        assert_eq!(v["table"], "docs");
        let key = (
            v["commit_ts"].as_u64().unwrap(),
            v["row"].as_str().unwrap().to_owned(),
            v["column"].as_str().unwrap().to_owned(),
        );
        let value = if v["deleted"] == true { None } else { Some(v["value"].as_str().unwrap().to_owned()) };
        if let Some(previous) = changes.insert(key.clone(), value.clone()) {
            assert_eq!(previous, value, "two lines of {key:?} disagree");
        }
    }
    let mut out: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for ((_, row, column), value) in changes {
        match value {
            Some(v) => {
                out.entry(row).or_default().insert(column, v);
            }
            None => {
                if let Some(cells) = out.get_mut(&row) {
                    cells.remove(&column);
                    if cells.is_empty() {
                        out.remove(&row);
                    }
                }
            }
        }
    }
    out
}

#[test]
fn postgres_and_jsonl_equal_the_store_through_a_killed_host_and_a_stopped_server() {
    let Some(mut pg) = Postgres::start("e2e") else { return };
    let sb = Sandbox::new("e2e", &sinks_toml(&pg.url()));
    let mut host = Host::start(&sb);

    // 1. A load reaches PostgreSQL and the file.
    sb.load("a.jsonl", &records(300, 1, 0));
    let want = sb.store_state();
    assert_eq!(want.len(), 300);
    wait_until("PostgreSQL equals the store", 60, || (pg.table("docs") == Some(want.clone())).then_some(()));
    wait_until("the file equals the store", 30, || (fold_jsonl(&sb.path("out/changes.jsonl")) == want).then_some(()));
    // The sink counts a batch after PostgreSQL committed it and the feed moved: a moment after
    // the table shows it.
    let pg_status = wait_until("the status counts what PostgreSQL holds", 30, || {
        let status = sb.status();
        let sinks = status["host"]["sinks"].as_array().unwrap().clone();
        assert_eq!(sinks.len(), 2, "{status}");
        let pg_status = sinks.into_iter().find(|s| s["name"] == "pg").unwrap();
        (pg_status["delivered"].as_u64().unwrap() >= 600).then_some(pg_status)
    });
    assert_eq!(pg_status["owner"], true, "{pg_status}");
    assert_eq!(pg_status["destination"], "postgres postgres.docs");
    let metrics = ureq_get(&format!("{}/metrics", endpoint(&sb)));
    assert!(metrics.contains("percolator_sink_delivered_total{sink=\"pg\",kind=\"postgres\"}"), "{metrics}");

    // 2. Updates and deletions, and the host SIGKILLed in the middle of delivering them: the
    //    test holds a lock on the table, so the sink's PostgreSQL transaction waits inside its
    //    batch when the host dies. A new host (which takes the subscriptions over once the
    //    dead one's lease is gone) delivers that batch again, and the rest.
    let mut locker = pg.client();
    let mut lock = locker.transaction().unwrap();
    lock.batch_execute("LOCK TABLE docs IN ACCESS EXCLUSIVE MODE").unwrap();
    sb.load("b.jsonl", &records(600, 2, 7));
    wait_until("the sink waits inside its PostgreSQL transaction", 30, || {
        let waiting: i64 = pg
            .client()
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'percolator-sink' \
                 AND wait_event_type = 'Lock' AND state = 'active'",
                &[],
            )
            .unwrap()
            .get(0);
        (waiting > 0).then_some(())
    });
    host.kill();
    lock.rollback().unwrap();
    drop(locker);
    // The batch it was in never committed in PostgreSQL: the table is exactly the store's
    // snapshot at the subscription's position (read without a host, from the store file).
    let status = sb.status();
    let position = status["store"]["subscriptions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "pg")
        .and_then(|s| s["position"].as_u64())
        .expect("the pg sink delivered before the kill");
    let mut at_position: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for line in sb
        .ok(&["scan", "docs", "--columns", "raw:text,raw:n", "--limit", "100000", "--at", &position.to_string()])
        .lines()
    {
        let mut f = line.splitn(3, '\t');
        let (row, column, value) = (f.next().unwrap(), f.next().unwrap(), f.next().unwrap());
        at_position.entry(row.to_owned()).or_default().insert(column.to_owned(), value.to_owned());
    }
    assert_eq!(
        pg.table("docs"),
        Some(at_position),
        "PostgreSQL after the kill = the store at the sink's position {position}"
    );
    let host = Host::start(&sb);
    let want = sb.store_state();
    assert!(want.values().filter(|c| !c.contains_key("raw:text")).count() > 50, "deletions in the load");
    wait_until("PostgreSQL equals the store after the kill", 90, || {
        (pg.table("docs") == Some(want.clone())).then_some(())
    });
    wait_until("the file equals the store after the kill", 30, || {
        (fold_jsonl(&sb.path("out/changes.jsonl")) == want).then_some(())
    });

    // 3. PostgreSQL stopped during a load: the sink shows the error, the pipeline goes on, and
    //    nothing is lost once the server is back.
    pg.stop();
    sb.load("c.jsonl", &records(400, 3, 5));
    let want = sb.store_state();
    let error = wait_until("the sink shows the error", 30, || {
        let status = sb.status();
        let s = status["host"]["sinks"].as_array()?.iter().find(|s| s["name"] == "pg")?.clone();
        s["last_error"].as_str().map(str::to_owned)
    });
    assert!(error.contains("PostgreSQL"), "{error}");
    let text = sb.ok(&["status"]);
    assert!(text.contains("pg (postgres -> postgres postgres.docs)") && text.contains("last error"), "{text}");
    std::thread::sleep(Duration::from_secs(3));
    pg.run();
    wait_until("PostgreSQL equals the store after the outage", 60, || {
        (pg.table("docs") == Some(want.clone())).then_some(())
    });
    wait_until("the error is cleared", 30, || {
        let status = sb.status();
        let s = status["host"]["sinks"].as_array()?.iter().find(|s| s["name"] == "pg")?.clone();
        s["last_error"].is_null().then_some(())
    });
    assert_eq!(fold_jsonl(&sb.path("out/changes.jsonl")), want);
    drop(host);
}

fn endpoint(sb: &Sandbox) -> String {
    std::fs::read_to_string(sb.path("store.redb.endpoint")).unwrap().trim().to_owned()
}

fn ureq_get(url: &str) -> String {
    ureq::get(url).call().unwrap().into_body().read_to_string().unwrap()
}

fn change(ts: u64, row: &str, column: &str, value: Option<&str>) -> Change {
    Change {
        cell: CellRef::new("docs", row.as_bytes().to_vec(), column),
        value: value.map(|v| v.as_bytes().to_vec()),
        commit_ts: Timestamp::from_raw(ts),
    }
}

#[test]
fn a_batch_delivered_twice_or_an_older_one_after_a_newer_changes_nothing() {
    let Some(pg) = Postgres::start("versions") else { return };
    let columns = ["raw:text".to_owned(), "raw:n".to_owned()];
    let mut sink = PostgresSink::new(&pg.url(), "v", vec!["raw_text".into(), "raw_n".into()]);
    let mut deliver = |changes: &[Change]| {
        sink.deliver(&Batch { sink: "s", table: "docs", columns: &columns, changes }).unwrap();
    };
    let first = [
        change(10, "a", "raw:text", Some("a1")),
        change(10, "a", "raw:n", Some("1")),
        change(11, "b", "raw:text", Some("b1")),
    ];
    let second = [change(20, "a", "raw:text", Some("a2")), change(21, "b", "raw:text", None)];
    deliver(&first);
    deliver(&second);
    let table = |pg: &Postgres| {
        let mut c = pg.client();
        c.query("SELECT \"row\", raw_text, raw_text_version, raw_n, raw_n_version FROM v ORDER BY \"row\"", &[])
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r.get::<_, String>(0),
                    r.get::<_, Option<String>>(1),
                    r.get::<_, Option<i64>>(2),
                    r.get::<_, Option<String>>(3),
                    r.get::<_, Option<i64>>(4),
                )
            })
            .collect::<Vec<_>>()
    };
    let want = vec![
        ("a".to_owned(), Some("a2".to_owned()), Some(20), Some("1".to_owned()), Some(10)),
        ("b".to_owned(), None, Some(21), None, None), // a tombstone: deleted at 21
    ];
    assert_eq!(table(&pg), want);
    // The same batches again (a redelivery after a crash), and the older one after the newer.
    deliver(&second);
    deliver(&first);
    assert_eq!(table(&pg), want, "a repeat or an older batch changed the table");
    // An older change inside a batch with a newer one: only the newer wins.
    deliver(&[change(15, "b", "raw:text", Some("late")), change(30, "c", "raw:text", Some("\u{0}bytes"))]);
    let mut c = pg.client();
    let b: Option<String> = c.query_one("SELECT raw_text FROM v WHERE \"row\" = 'b'", &[]).unwrap().get(0);
    assert_eq!(b, None, "a late write resurrected a deleted cell");
    // A value that is not text (a NUL byte) goes to the bytes column.
    let r = c.query_one("SELECT raw_text, raw_text_bytes FROM v WHERE \"row\" = 'c'", &[]).unwrap();
    assert_eq!((r.get::<_, Option<String>>(0), r.get::<_, Option<Vec<u8>>>(1)), (None, Some(b"\0bytes".to_vec())));
    // One cell changed several times in a batch (one statement may touch a row only once): the
    // newest change wins, each column on its own; a delete then a put is the put.
    deliver(&[
        change(40, "d", "raw:text", Some("d1")),
        change(41, "d", "raw:n", Some("4")),
        change(42, "d", "raw:text", None),
        change(43, "d", "raw:text", Some("d3")),
        change(44, "b", "raw:text", Some("b4")),
        change(45, "b", "raw:text", None),
    ]);
    let rows = c
        .query(
            "SELECT \"row\", raw_text, raw_text_version, raw_n, raw_n_version FROM v WHERE \"row\" IN ('b', 'd') ORDER BY \"row\"",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
        .collect::<Vec<(String, Option<String>, Option<i64>, Option<String>, Option<i64>)>>();
    assert_eq!(
        rows,
        vec![
            ("b".to_owned(), None, Some(45), None, None),
            ("d".to_owned(), Some("d3".to_owned()), Some(43), Some("4".to_owned()), Some(41)),
        ]
    );
}

// ---------------------------------------------------------------------------------------------
// A webhook receiver of the test's own.

/// What the receiver does with the next requests, in order; then it answers 200.
#[derive(Clone, Copy, Debug)]
enum Answer {
    Status(u16),
    /// Reads the request, then waits this long before answering 200 (past the sink's timeout).
    Stall(Duration),
    /// Reads the request, then closes the connection without an answer.
    HangUp,
}

#[derive(Default)]
struct Received {
    /// (idempotency key, body) of every request answered 2xx.
    acked: Vec<(String, serde_json::Value)>,
    /// Requests seen in all.
    requests: usize,
}

fn receiver(script: Vec<Answer>) -> (String, Arc<Mutex<Received>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let received = Arc::new(Mutex::new(Received::default()));
    let next = Arc::new(AtomicUsize::new(0));
    let r = received.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let (r, script, next) = (r.clone(), script.clone(), next.clone());
            std::thread::spawn(move || serve(stream, &r, &script, &next));
        }
    });
    (url, received)
}

fn serve(stream: TcpStream, received: &Mutex<Received>, script: &[Answer], next: &AtomicUsize) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut length = 0;
        let mut key = String::new();
        loop {
            let mut h = String::new();
            reader.read_line(&mut h).unwrap();
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            let (name, value) = h.split_once(':').unwrap();
            match name.to_ascii_lowercase().as_str() {
                "content-length" => length = value.trim().parse().unwrap(),
                "idempotency-key" => key = value.trim().to_owned(),
                _ => {}
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        let i = next.fetch_add(1, Ordering::SeqCst);
        received.lock().unwrap().requests += 1;
        let mut out = stream.try_clone().unwrap();
        let answer = script.get(i).copied().unwrap_or(Answer::Status(200));
        let status = match answer {
            Answer::HangUp => return,
            Answer::Stall(d) => {
                std::thread::sleep(d);
                200
            }
            Answer::Status(s) => s,
        };
        let text = if status == 200 { "ok" } else { "no thanks" };
        let written = write!(out, "HTTP/1.1 {status} X\r\nContent-Length: {}\r\n\r\n{text}", text.len());
        if written.is_ok() && (200..300).contains(&status) && !matches!(answer, Answer::Stall(_)) {
            received.lock().unwrap().acked.push((key, serde_json::from_slice(&body).unwrap()));
        }
    }
}

#[test]
fn a_webhook_that_fails_stalls_and_hangs_up_gets_every_change_once_in_effect() {
    let script = vec![Answer::Status(500), Answer::Stall(Duration::from_secs(3)), Answer::HangUp, Answer::Status(503)];
    let (url, received) = receiver(script);
    let sinks = format!(
        "[[sink]]\nname = \"hook\"\nkind = \"webhook\"\ntable = \"docs\"\ncolumns = [\"raw:text\", \"raw:n\"]\n\
         url = \"{url}\"\ntimeout = \"1s\"\nbatch = 50\n"
    );
    let sb = Sandbox::new("webhook", &sinks);
    let _host = Host::start(&sb);
    sb.load("a.jsonl", &records(120, 1, 0));
    sb.load("b.jsonl", &records(120, 2, 4));
    let want = sb.store_state();
    wait_until("the webhook has every change", 90, || (fold_acked(&received) == want).then_some(()));
    let r = received.lock().unwrap();
    for (key, _) in &r.acked {
        assert!(key.starts_with("hook-"), "{key}");
    }
    assert!(
        r.requests >= r.acked.len() + 4,
        "the failures were retried: {} requests, {} acked",
        r.requests,
        r.acked.len()
    );
    // Each acknowledged batch once: the sink moved on after every 2xx.
    let mut keys: Vec<&String> = r.acked.iter().map(|(k, _)| k).collect();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), r.acked.len(), "a batch acknowledged twice");
}

#[test]
fn a_refused_webhook_batch_is_parked_and_listed() {
    // Refused: the first load; then taken: the second; refused: the first retry of the parked
    // batch; then taken: the second; refused: the third load.
    let script = [422, 200, 422, 200, 422].map(Answer::Status).to_vec();
    let (url, received) = receiver(script);
    let sinks = format!(
        "[[sink]]\nname = \"hook\"\nkind = \"webhook\"\ntable = \"docs\"\ncolumns = [\"raw:text\"]\nurl = \"{url}\"\n"
    );
    let sb = Sandbox::new("webhook-4xx", &sinks);
    let _host = Host::start(&sb);
    sb.load("a.jsonl", &records(5, 1, 0));
    let parked = wait_until("the batch is parked", 30, || {
        let status = sb.status();
        let s = status["host"]["sinks"][0].clone();
        s["dead_letters"].as_array().filter(|d| !d.is_empty()).cloned()
    });
    assert_eq!(parked.len(), 1);
    assert!(parked[0]["error"].as_str().unwrap().contains("422: no thanks"), "{parked:?}");
    assert_eq!(parked[0]["changes"], 5);
    let file = parked[0]["file"].as_str().unwrap();
    let kept: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    assert_eq!(kept["changes"].as_array().unwrap().len(), 5);
    // The sink moved on: the next change is delivered.
    sb.load("b.jsonl", &records(1, 2, 0));
    wait_until("the next batch is delivered", 30, || (!received.lock().unwrap().acked.is_empty()).then_some(()));
    let text = sb.ok(&["status"]);
    assert!(text.contains("1 refused batches parked"), "{text}");

    // Through the API: sent again (the receiver takes it now) it is gone; an unknown one is 404.
    let api = percolator_api::Remote::new(&endpoint(&sb), None);
    let id = parked[0]["id"].as_str().unwrap().to_owned();
    let request = |id: &str, action| SinkDeadLetterRequest { sink: "hook".into(), id: id.into(), action };
    let e = api.call::<SinkDeadLetter>(&request("0-0", SinkDeadLetterAction::Discard)).unwrap_err();
    assert_eq!(e.kind, percolator_api::ErrorKind::NotFound, "{e}");
    let e = api.call::<SinkDeadLetter>(&request(&id, SinkDeadLetterAction::Retry)).unwrap_err();
    assert!(e.message.contains("not acknowledged") && e.message.contains("422"), "{e}");
    assert!(std::path::Path::new(file).exists(), "a batch refused again is kept");
    let acked = received.lock().unwrap().acked.len();
    let done = api.call::<SinkDeadLetter>(&request(&id, SinkDeadLetterAction::Retry)).unwrap();
    assert!(done.removed && done.changes == 5, "{done:?}");
    assert_eq!(received.lock().unwrap().acked.len(), acked + 1);
    assert!(!std::path::Path::new(file).exists());
    assert_eq!(sb.status()["host"]["sinks"][0]["dead_letters"].as_array().unwrap().len(), 0);
    // Discarded: gone without a request to the destination.
    sb.load("c.jsonl", &records(2, 3, 0));
    let parked = wait_until("the third batch is parked", 30, || {
        let status = sb.status();
        status["host"]["sinks"][0]["dead_letters"].as_array().filter(|d| !d.is_empty()).cloned()
    });
    let requests = received.lock().unwrap().requests;
    let done = api.call::<SinkDeadLetter>(&request(parked[0]["id"].as_str().unwrap(), SinkDeadLetterAction::Discard));
    assert!(done.unwrap().removed);
    assert_eq!(received.lock().unwrap().requests, requests);
    assert_eq!(sb.status()["host"]["sinks"][0]["dead_letters"].as_array().unwrap().len(), 0);
}

#[test]
fn a_bad_sink_is_a_located_error() {
    let cases = [
        (
            "[[sink]]\nname = \"s\"\nkind = \"kafka\"\ntable = \"docs\"\ncolumns = [\"raw:a\"]\n",
            "p.toml:9: sink[0].kind: \"kafka\" is not one of \"postgres\", \"jsonl\", \"webhook\"",
        ),
        (
            "[[sink]]\nname = \"s\"\nkind = \"postgres\"\ntable = \"docs\"\ncolumns = [\"raw:a\"]\ntarget = \"t\"\n",
            "p.toml:7: sink[0].url: is missing (postgresql://user@host:port/database)",
        ),
        (
            "[[sink]]\nname = \"s\"\nkind = \"postgres\"\ntable = \"docs\"\ncolumns = [\"raw:a\"]\nurl = \"mysql://x\"\ntarget = \"t\"\n",
            "p.toml:12: sink[0].url: \"mysql://x\" is not a postgresql:// URL",
        ),
        (
            "[[sink]]\nname = \"s\"\nkind = \"webhook\"\ntable = \"docs\"\ncolumns = [\"raw:a\"]\nurl = \"http://\"\n",
            "p.toml:12: sink[0].url:",
        ),
        (
            "[[sink]]\nname = \"s\"\nkind = \"jsonl\"\ntable = \"docs\"\ncolumns = [\"raw:a\"]\npath = \"x\"\ntimeout = \"1s\"\n",
            "p.toml:13: sink[0].timeout: does not apply to a jsonl sink (it takes: path)",
        ),
        (
            "[[sink]]\nname = \"s\"\nkind = \"jsonl\"\ntable = \"docs\"\ncolumns = \"raw:a\"\npath = \"x\"\n",
            "p.toml:11: sink[0].columns: expected a list of strings, found the string \"raw:a\"",
        ),
        (
            "[[sink]]\nname = \"s\"\nkind = \"jsonl\"\ntable = \"docs\"\ncolumns = [\"raw:a\"]\npath = \"x\"\n\
             [[sink]]\nname = \"t\"\nkind = \"jsonl\"\ntable = \"docs\"\ncolumns = [\"raw:b\"]\npath = \"x\"\n",
            "sink[1].path: ",
        ),
    ];
    for (toml, want) in cases {
        let sb = Sandbox::new("bad", toml);
        let out = sb.command().arg("up").output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{toml}");
        let e = String::from_utf8_lossy(&out.stderr);
        assert!(e.contains(want), "for\n{toml}\nwant {want:?}\ngot {e}");
    }
}

#[test]
fn a_reload_adds_removes_and_rejects_sinks() {
    let jsonl = |name: &str, path: &str| {
        format!(
            "[[sink]]\nname = \"{name}\"\nkind = \"jsonl\"\ntable = \"docs\"\ncolumns = [\"raw:text\", \"raw:n\"]\npath = \"{path}\"\n"
        )
    };
    let sb = Sandbox::new("reload", &jsonl("a", "a.out"));
    let _host = Host::start(&sb);
    sb.load("1.jsonl", &records(10, 1, 0));
    let names = |sb: &Sandbox| -> Vec<String> {
        let status = sb.status();
        status["host"]["sinks"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap().to_owned()).collect()
    };
    wait_until("a delivered", 30, || (fold_jsonl(&sb.path("a.out")) == sb.store_state()).then_some(()));
    // Replaced by b: a stops, b starts from the oldest change kept.
    sb.config(&jsonl("b", "b.out"));
    wait_until("b replaces a", 30, || (names(&sb) == ["b"]).then_some(()));
    sb.load("2.jsonl", &records(10, 2, 3));
    let want = sb.store_state();
    wait_until("b delivered everything", 30, || (fold_jsonl(&sb.path("b.out")) == want).then_some(()));
    assert_ne!(fold_jsonl(&sb.path("a.out")), want, "a removed sink went on delivering");
    // a's subscription went with it (it would have held the change log for good).
    let subscriptions = |sb: &Sandbox| -> Vec<String> {
        let status = sb.status();
        status["store"]["subscriptions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(subscriptions(&sb), ["b"]);
    let text = sb.ok(&["status"]);
    assert!(text.contains("change log: docs/raw:n, docs/raw:text") && text.contains("subscription b: at "), "{text}");
    // A bad sink is rejected as a whole: b keeps running and the error is shown.
    sb.config(&format!("{}[[sink]]\nname = \"c\"\nkind = \"nope\"\n", jsonl("b", "b.out")));
    let error = wait_until("the reload is rejected", 30, || {
        let status = sb.status();
        status["host"]["last_error"].as_str().map(str::to_owned)
    });
    assert!(error.contains("sink[1].kind"), "{error}");
    assert_eq!(names(&sb), ["b"]);
}

/// The sink's status on the host of `sb`.
fn sink_status(sb: &Sandbox, name: &str) -> Option<serde_json::Value> {
    let status = sb.status();
    status["host"]["sinks"].as_array()?.iter().find(|s| s["name"] == name).cloned()
}

/// The worker id of the host of `sb`.
fn worker_id(sb: &Sandbox) -> u64 {
    let status = sb.status();
    let workers = status["store"]["workers"].as_array().unwrap();
    workers.iter().find(|w| w["this"] == true).unwrap()["id"].as_u64().unwrap()
}

/// The acknowledged webhook batches folded into a table state (deduplicated by change).
fn fold_acked(received: &Mutex<Received>) -> BTreeMap<String, BTreeMap<String, String>> {
    let r = received.lock().unwrap();
    let mut changes: BTreeMap<(u64, String, String), Option<String>> = BTreeMap::new();
    for (_, body) in &r.acked {
        for c in body["changes"].as_array().unwrap() {
            let value = if c["deleted"] == true { None } else { Some(c["value"].as_str().unwrap().to_owned()) };
            let key = (
                c["commit_ts"].as_u64().unwrap(),
                c["row"].as_str().unwrap().to_owned(),
                c["column"].as_str().unwrap().to_owned(),
            );
            changes.insert(key, value);
        }
    }
    let mut state: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for ((_, row, column), value) in changes {
        match value {
            Some(v) => {
                state.entry(row).or_default().insert(column, v);
            }
            None => {
                state.entry(row.clone()).or_default().remove(&column);
                if state[&row].is_empty() {
                    state.remove(&row);
                }
            }
        }
    }
    state
}

/// Two `percolator up` hosts on one Redis namespace (the oracle service through etcd): exactly
/// one owns and delivers the sink; SIGKILLed, the other takes it over once the dead one's lease
/// is gone, and the receiver ends with the store's state. Runs only on the Redis backend
/// (`PERCOLATOR_TEST_BACKEND=redis`, as `scripts/test` runs it against `scripts/dev-cluster`).
#[test]
fn one_live_host_delivers_and_another_takes_over_when_it_dies() {
    if std::env::var("PERCOLATOR_TEST_BACKEND").as_deref() != Ok("redis") {
        eprintln!("SKIPPED: needs PERCOLATOR_TEST_BACKEND=redis (scripts/test runs it on scripts/dev-cluster)");
        return;
    }
    assert!(std::env::var("PERCOLATOR_ETCD").is_ok(), "two hosts need the oracle service: PERCOLATOR_ETCD");
    let (url, received) = receiver(Vec::new());
    let sink = format!(
        "[[sink]]\nname = \"hook\"\nkind = \"webhook\"\ntable = \"docs\"\ncolumns = [\"raw:text\", \"raw:n\"]\nurl = \"{url}\"\nbatch = 20\n"
    );
    let store = common::store_section("store.redb", "fsync");
    let a = Sandbox::with_store("handover-a", &store, &sink);
    let b = Sandbox::with_store("handover-b", &store, &sink);
    let mut host_a = Host::start(&a);
    wait_until("a owns the sink", 30, || sink_status(&a, "hook").filter(|s| s["owner"] == true).map(|_| ()));
    let _host_b = Host::start(&b);
    let a_id = worker_id(&a);
    let standby = wait_until("b sees a as the owner", 30, || {
        sink_status(&b, "hook").filter(|s| s["owner_id"].as_u64() == Some(a_id))
    });
    assert_eq!(standby["owner"], false, "two owners: {standby}");
    b.load("1.jsonl", &records(100, 1, 0));
    let want = b.store_state();
    wait_until("the receiver has the first load", 60, || (fold_acked(&received) == want).then_some(()));
    assert_eq!(sink_status(&b, "hook").unwrap()["delivered"], 0, "the standby delivered");

    host_a.kill();
    b.load("2.jsonl", &records(100, 2, 3));
    let want = b.store_state();
    wait_until("b took the sink over", 60, || sink_status(&b, "hook").filter(|s| s["owner"] == true).map(|_| ()));
    wait_until("the receiver has the second load", 60, || (fold_acked(&received) == want).then_some(()));
    // Counted once the receiver acknowledged and the feed moved: a moment after it has the load.
    wait_until("b counts what it delivered", 30, || {
        sink_status(&b, "hook").filter(|s| s["delivered"].as_u64().unwrap() > 0).map(|_| ())
    });
}

/// The guest component `name` as scripts/build-guests leaves it (`target/guests`, or
/// `$PERCOLATOR_GUESTS`).
fn guest_component(name: &str) -> PathBuf {
    let dir = std::env::var_os("PERCOLATOR_GUESTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/guests"));
    let p = dir.join(name);
    assert!(p.is_file(), "{} is missing: run scripts/build-guests first", p.display());
    p
}

/// A sink with a transform (`guest-examples/sink-title`): the pages' HTML goes in, their titles
/// come out (only the pages that have one); a transform that refuses a batch parks it and the
/// sink goes on; a bad transform configuration is a located error, an observer given as a
/// transform is refused at load.
#[test]
fn a_transform_delivers_what_it_makes_of_each_batch() {
    let titles = "[[sink]]\nname = \"titles\"\nkind = \"jsonl\"\ntable = \"docs\"\ncolumns = [\"raw:html\"]\n\
                  outputs = [\"page:title\"]\ntransform = \"sink_title.wasm\"\npath = \"titles.jsonl\"\n\
                  [sink.params]\ntarget = \"page:title\"\n";
    let sb = Sandbox::new("transform", titles);
    std::fs::copy(guest_component("sink_title.wasm"), sb.path("observers/sink_title.wasm")).unwrap();
    let _host = Host::start(&sb);
    sb.load(
        "pages.jsonl",
        "{\"row\": \"a\", \"html\": \"<html><title>One &amp; Two</title></html>\"}\n\
         {\"row\": \"b\", \"html\": \"<p>no title</p>\"}\n\
         {\"row\": \"c\", \"html\": \"<title>\\n  Three \\n</title>\"}\n",
    );
    let want: BTreeMap<String, BTreeMap<String, String>> = [("a", "One & Two"), ("c", "Three")]
        .into_iter()
        .map(|(r, t)| (r.to_owned(), [("page:title".to_owned(), t.to_owned())].into_iter().collect()))
        .collect();
    wait_until("the titles are delivered", 60, || (fold_jsonl(&sb.path("titles.jsonl")) == want).then_some(()));
    let text = std::fs::read_to_string(sb.path("titles.jsonl")).unwrap();
    assert!(text.lines().all(|l| l.contains("\"column\":\"page:title\"")), "only the transform's output: {text}");

    // A transform that refuses every batch: each is parked (with the guest's words) and the
    // sink goes on to the next one; the other sink keeps delivering.
    let refusing = "[[sink]]\nname = \"refusing\"\nkind = \"jsonl\"\ntable = \"docs\"\ncolumns = [\"raw:html\"]\n\
                    transform = \"sink_hostile.wasm\"\npath = \"refused.jsonl\"\n[sink.params]\nmode = \"error\"\n";
    std::fs::copy(guest_component("sink_hostile.wasm"), sb.path("observers/sink_hostile.wasm")).unwrap();
    sb.config(&format!("{titles}\n{refusing}"));
    wait_until("the refusing sink runs", 60, || sink_status(&sb, "refusing").map(|_| ()));
    sb.load("more.jsonl", "{\"row\": \"d\", \"html\": \"<title>Four</title>\"}\n");
    let parked = wait_until("a refused batch is parked", 60, || {
        let s = sink_status(&sb, "refusing")?;
        let parked = s["dead_letters"].as_array()?.clone();
        (!parked.is_empty()).then_some(parked)
    });
    assert!(parked[0].to_string().contains("refusing a batch of"), "{parked:?}");
    wait_until("the titles sink delivers the new page", 60, || {
        fold_jsonl(&sb.path("titles.jsonl")).contains_key("d").then_some(())
    });
    assert!(std::fs::read_to_string(sb.path("refused.jsonl")).unwrap_or_default().is_empty());

    // Bad transform settings, each located.
    for (toml, want) in [
        (
            "[[sink]]\nname = \"s\"\nkind = \"jsonl\"\ntable = \"docs\"\ncolumns = [\"raw:a\"]\npath = \"x\"\ntransform = \"nope.wasm\"\n",
            "sink[0].transform: ",
        ),
        (
            "[[sink]]\nname = \"s\"\nkind = \"jsonl\"\ntable = \"docs\"\ncolumns = [\"raw:a\"]\npath = \"x\"\noutputs = [\"a:b\"]\n",
            "sink[0].outputs: names what a transform writes: it needs transform",
        ),
        (
            "[[sink]]\nname = \"s\"\nkind = \"jsonl\"\ntable = \"docs\"\ncolumns = [\"raw:a\"]\npath = \"x\"\ntimeout_ms = 5\n",
            "sink[0].timeout_ms: applies to a transform: the sink has no transform",
        ),
    ] {
        let bad = Sandbox::new("transform-bad", toml);
        let out = bad.command().arg("up").output().unwrap();
        assert_eq!(out.status.code(), Some(1), "{toml}");
        let e = String::from_utf8_lossy(&out.stderr);
        assert!(e.contains(want), "for\n{toml}\nwant {want:?}\ngot {e}");
    }
    // An observer component given as a transform is refused at load, saying what it is.
    let wrong = Sandbox::new(
        "transform-wrong",
        "[[sink]]\nname = \"s\"\nkind = \"jsonl\"\ntable = \"docs\"\ncolumns = [\"raw:a\"]\npath = \"x\"\ntransform = \"up.wasm\"\n",
    );
    std::fs::copy(guest_component("uppercase.wasm"), wrong.path("observers/up.wasm")).unwrap();
    let out = wrong.command().arg("up").output().unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.code() == Some(1) && e.contains("sink s: transform") && e.contains("observer"), "{e}");
}
