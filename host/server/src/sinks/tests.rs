//! The runner against a model feed (a list of changes, one subscription) with failures
//! injected, and the kinds' pure parts.

use std::sync::atomic::AtomicUsize;

use percolator_store::CellRef;

use super::*;

/// A change log and named subscriptions in memory.
#[derive(Default)]
struct Model {
    log: Mutex<Vec<Change>>,
    /// name → position.
    subs: Mutex<BTreeMap<String, u64>>,
    /// Whether claims succeed.
    owned: AtomicBool,
    /// Fail this many `changes` calls first.
    fail_reads: AtomicUsize,
}

fn change(ts: u64, row: &str, value: Option<&str>) -> Change {
    Change {
        cell: CellRef::new("t", row.as_bytes().to_vec(), "d:v"),
        value: value.map(|v| v.as_bytes().to_vec()),
        commit_ts: Timestamp::from_raw(ts),
    }
}

/// The token after every change at or below `ts`.
fn token(ts: u64) -> ChangeToken {
    format!("c1.{ts}.0").parse().unwrap()
}

impl Model {
    fn position(&self, name: &str) -> Option<u64> {
        self.subs.lock().unwrap().get(name).copied()
    }
}

impl Feed for Model {
    fn changes(&self, _: &str, _: &[String], since: &ChangeToken, limit: usize) -> Result<ChangePage, String> {
        if self.fail_reads.load(Ordering::SeqCst) > 0 {
            self.fail_reads.fetch_sub(1, Ordering::SeqCst);
            return Err("store unavailable".into());
        }
        let log = self.log.lock().unwrap();
        let changes: Vec<Change> = log
            .iter()
            .filter(|c| c.commit_ts > since.position().unwrap_or(Timestamp::ZERO))
            .take(limit)
            .cloned()
            .collect();
        let head = log.last().map_or(Timestamp::ZERO, |c| c.commit_ts);
        let next = changes.last().map_or(head.max(since.position().unwrap_or(Timestamp::ZERO)), |c| c.commit_ts);
        Ok(ChangePage { changes, next: token(next.raw()), more: false })
    }

    fn claim(&self, name: &str) -> Result<bool, String> {
        if !self.owned.load(Ordering::SeqCst) {
            return Ok(false);
        }
        self.subs.lock().unwrap().entry(name.to_owned()).or_insert(0);
        Ok(true)
    }

    fn subscription(&self, name: &str) -> Result<Option<(ChangeToken, Option<u64>)>, String> {
        let owner = if self.owned.load(Ordering::SeqCst) { Some(1) } else { Some(2) };
        Ok(self.position(name).map(|p| (if p == 0 { ChangeToken::origin() } else { token(p) }, owner)))
    }

    fn advance(&self, name: &str, to: &ChangeToken) -> Result<(), String> {
        if !self.owned.load(Ordering::SeqCst) {
            return Err("not the owner".into());
        }
        self.subs.lock().unwrap().insert(name.to_owned(), to.position().map_or(0, Timestamp::raw));
        Ok(())
    }
}

/// Records every batch; fails the first `fail` attempts with `failure`; checks that the
/// position had not moved past a batch before it was acknowledged.
struct Recorder {
    feed: Arc<Model>,
    seen: Arc<Mutex<Vec<Vec<u64>>>>,
    fail: usize,
    failure: Failure,
}

impl Deliver for Recorder {
    fn deliver(&mut self, batch: &Batch<'_>) -> Result<(), Failure> {
        let position = self.feed.position(batch.sink).unwrap_or(0);
        assert!(
            batch.changes.iter().all(|c| c.commit_ts.raw() > position),
            "the position ({position}) moved past a batch before it was acknowledged"
        );
        if self.fail > 0 {
            self.fail -= 1;
            return Err(self.failure.clone());
        }
        self.seen.lock().unwrap().push(batch.changes.iter().map(|c| c.commit_ts.raw()).collect());
        Ok(())
    }
}

fn sink(name: &str) -> Sink {
    Sink {
        name: name.into(),
        table: "t".into(),
        columns: vec!["d:v".into()],
        batch: 3,
        kind: SinkKind::Jsonl { path: PathBuf::from("unused") },
        transform: None,
        outputs: vec!["d:v".into()],
    }
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn temp_dir(name: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("percolator-sinks-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).unwrap();
    p
}

fn start(
    model: &Arc<Model>,
    name: &str,
    fail: usize,
    failure: Failure,
    dead: &Path,
) -> (Runner, Arc<Mutex<Vec<Vec<u64>>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let kind = Recorder { feed: model.clone(), seen: seen.clone(), fail, failure };
    let runner = spawn(model.clone(), sink(name), None, Box::new(kind), dead.to_owned()).unwrap();
    (runner, seen)
}

#[test]
fn every_change_is_delivered_in_order_and_the_position_follows_the_acks() {
    let model = Arc::new(Model { owned: AtomicBool::new(true), ..Model::default() });
    model.log.lock().unwrap().extend((1..=8).map(|ts| change(ts * 10, &format!("r{ts}"), Some("v"))));
    let dir = temp_dir("order");
    let (mut runner, seen) = start(&model, "s", 2, Failure::Retry("down".into()), &dir);
    wait_until("all delivered", || model.position("s") == Some(80));
    // Batches of at most 3, in commit order, nothing twice (the two failures were retried).
    assert_eq!(*seen.lock().unwrap(), vec![vec![10, 20, 30], vec![40, 50, 60], vec![70, 80]]);
    // More changes later are picked up by the caught-up runner.
    model.log.lock().unwrap().push(change(90, "r9", None));
    wait_until("the new change delivered", || model.position("s") == Some(90));
    let status = runner.shared.status().clone();
    assert_eq!(status.delivered, 9);
    assert!(status.owner);
    assert_eq!(status.last_error, None, "a success clears the error");
    runner.stop();
}

#[test]
fn a_failing_read_is_retried_and_shown() {
    let model = Arc::new(Model { owned: AtomicBool::new(true), ..Model::default() });
    model.fail_reads.store(2, Ordering::SeqCst);
    model.log.lock().unwrap().push(change(5, "a", Some("x")));
    let dir = temp_dir("reads");
    let (mut runner, seen) = start(&model, "s", 0, Failure::Retry(String::new()), &dir);
    wait_until("delivered", || model.position("s") == Some(5));
    assert_eq!(*seen.lock().unwrap(), vec![vec![5]]);
    runner.stop();
}

#[test]
fn only_the_owner_delivers_and_a_standby_takes_over() {
    let model = Arc::new(Model::default());
    model.log.lock().unwrap().push(change(7, "a", Some("x")));
    let dir = temp_dir("standby");
    let (mut runner, seen) = start(&model, "s", 0, Failure::Retry(String::new()), &dir);
    std::thread::sleep(Duration::from_millis(300));
    assert!(seen.lock().unwrap().is_empty(), "a standby delivered");
    {
        let s = runner.shared.status();
        assert!(!s.owner);
        assert_eq!(s.owner_id, None, "no subscription yet");
    }
    // The owner "dies": the next claim succeeds.
    model.owned.store(true, Ordering::SeqCst);
    wait_until("taken over", || model.position("s") == Some(7));
    assert_eq!(*seen.lock().unwrap(), vec![vec![7]]);
    runner.stop();
}

#[test]
fn a_refused_batch_is_parked_and_the_sink_moves_on() {
    let model = Arc::new(Model { owned: AtomicBool::new(true), ..Model::default() });
    model.log.lock().unwrap().extend([change(1, "a", Some("x")), change(2, "b", None)]);
    let dir = temp_dir("parked");
    let (mut runner, seen) = start(&model, "s", 1, Failure::Reject("422: no".into()), &dir);
    wait_until("moved on", || model.position("s") == Some(2));
    assert!(seen.lock().unwrap().is_empty(), "the batch was refused, not delivered");
    let parked = read_dead_letters(&dir);
    assert_eq!(parked.len(), 1);
    assert_eq!((parked[0].first_ts, parked[0].last_ts, parked[0].changes), (1, 2, 2));
    assert_eq!(parked[0].error, "422: no");
    assert!(runner.shared.status().last_error.as_deref().is_some_and(|e| e.contains("parked")));
    runner.stop();
}

#[test]
fn apply_replaces_changed_sinks_and_stops_removed_ones() {
    let model = Arc::new(Model::default());
    let dir = temp_dir("apply");
    let sinks = Sinks::new(model.clone(), dir.clone());
    let mut a = sink("a");
    a.kind = SinkKind::Jsonl { path: dir.join("a.jsonl") };
    let mut b = sink("b");
    b.columns = vec!["d:w".into(), "d:v".into()];
    b.kind = SinkKind::Jsonl { path: dir.join("b.jsonl") };
    sinks.apply(&[a.clone(), b.clone()], &BTreeMap::new());
    assert_eq!(sinks.status().iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["a", "b"]);
    sinks.apply(&[a.clone()], &BTreeMap::new());
    assert_eq!(sinks.status().iter().map(|s| s.name.as_str()).collect::<Vec<_>>(), ["a"]);
    a.batch = 7;
    sinks.apply(&[a], &BTreeMap::new());
    assert_eq!(sinks.status().len(), 1, "a changed sink is replaced, not doubled");
    sinks.stop();
    assert!(sinks.status().is_empty());
}

#[test]
fn changes_as_json() {
    let c = change(42, "r", Some("text"));
    assert_eq!(change_json(&c).to_string(), r#"{"column":"d:v","commit_ts":42,"row":"r","table":"t","value":"text"}"#);
    let mut bin = change(43, "r", None);
    assert_eq!(change_json(&bin)["deleted"], true);
    bin.value = Some(vec![0xff, 0]);
    bin.cell.row = vec![0xfe];
    let j = change_json(&bin);
    assert_eq!((j["value_base64"].as_str(), j["row_base64"].as_str()), (Some("/wA="), Some("/g==")));
}

#[test]
fn jsonl_appends_fsynced_lines_and_cuts_a_torn_tail() {
    let dir = temp_dir("jsonl");
    let path = dir.join("out/changes.jsonl");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    // A previous host died in the middle of a line.
    std::fs::write(&path, "{\"a\":1}\n{\"torn").unwrap();
    let mut s = jsonl::JsonlSink::new(path.clone());
    let changes = [change(1, "a", Some("x")), change(2, "b", None)];
    let columns = ["d:v".to_owned()];
    s.deliver(&Batch { sink: "s", table: "t", columns: &columns, changes: &changes }).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    assert_eq!(lines[0], "{\"a\":1}");
    assert!(lines[2].contains("\"deleted\":true"), "{text}");
}

#[test]
fn postgres_sql_is_versioned_per_cell() {
    assert_eq!(
        postgres::upsert_sql("docs", "doc_title"),
        "INSERT INTO \"docs\" AS t (\"row\", \"doc_title\", \"doc_title_bytes\", \"doc_title_version\") \
         SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[], $4::bigint[]) \
         ON CONFLICT (\"row\") DO UPDATE SET \"doc_title\" = excluded.\"doc_title\", \"doc_title_bytes\" = excluded.\"doc_title_bytes\", \
         \"doc_title_version\" = excluded.\"doc_title_version\" WHERE t.\"doc_title_version\" IS NULL OR excluded.\"doc_title_version\" > t.\"doc_title_version\""
    );
    assert_eq!(postgres::row_text(b"plain"), "plain");
    assert_eq!(postgres::row_text(&[0xff, 0x01]), "\\xff01");
    assert_eq!(crate::config::postgres_column("doc:Title-1"), "doc_title_1");
    assert_eq!(crate::config::postgres_column("9x"), "c_9x");
}

#[test]
fn the_idempotency_key_names_the_batch() {
    let changes = [change(3, "a", None), change(9, "b", None)];
    let columns = ["d:v".to_owned()];
    let batch = Batch { sink: "hook", table: "t", columns: &columns, changes: &changes };
    assert_eq!(webhook::idempotency_key(&batch), "hook-3-9");
}
