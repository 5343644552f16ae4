//! The Redis backend against the in-memory one: the same random row operations (conditions and
//! mutations of every kind, several per call) give the same outcomes and leave the same stored
//! versions and notify cells. `percolator.lua` re-implements `cells::apply_row` server-side;
//! this is what keeps the two equal. Also: clear errors for a bad configuration or an
//! unreachable cluster.
//!
//! Needs a Redis Cluster (`PERCOLATOR_REDIS`, see `scripts/dev-cluster`); skipped without one
//! unless `PERCOLATOR_REQUIRE_REDIS` is set.

use percolator_testkit as common;

use std::time::Duration;

use percolator_redis::{RedisBigtable, RedisConfig};
use percolator_store::backends::{
    Bigtable, Condition, LockRecord, MemBigtable, Mutation, Op, RowMutation, ScanRange, WriteKind, WriteRecord, Writer,
};
use percolator_store::{CellRef, Error, Timestamp};
use proptest::prelude::*;

const ROWS: [&[u8]; 3] = [b"a", b"b\0x", b"\xffz"];
const COLUMNS: [&str; 2] = ["c:v", "c:w"];

fn ts(t: u64) -> Timestamp {
    Timestamp::from_raw(t)
}

/// Rows `[start, end)` of table `t` at `ts`, all columns.
fn range<'a>(start: &'a [u8], end: Option<&'a [u8]>, at: u64, limit: usize) -> ScanRange<'a> {
    ScanRange { table: "t", start, after_column: None, end, columns: None, prefixes: &[], ts: ts(at), limit }
}

fn column() -> impl Strategy<Value = String> {
    prop::sample::select(&COLUMNS[..]).prop_map(String::from)
}

fn condition() -> impl Strategy<Value = Condition> {
    prop_oneof![
        column().prop_map(|column| Condition::NoLock { column }),
        (column(), 1..8u64).prop_map(|(column, t)| Condition::NoWriteSince { column, since: ts(t) }),
        (column(), 1..8u64).prop_map(|(column, t)| Condition::LockAbsent { column, start_ts: ts(t) }),
        (column(), 1..8u64).prop_map(|(column, t)| Condition::LockIs { column, start_ts: ts(t) }),
    ]
}

fn writer() -> impl Strategy<Value = Writer> {
    (1..8u64, 0..3usize).prop_map(|(t, r)| Writer { start_ts: ts(t), primary: CellRef::new("t", ROWS[r], "c:v") })
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let lock = (0..3usize, 0..1000u64).prop_map(|(r, wall_ms)| LockRecord {
        primary: CellRef::new("t", ROWS[r], "c:v"),
        wall_ms,
        ttl_ms: 5,
        worker: 9,
    });
    let kind = prop_oneof![
        prop::collection::vec(any::<u8>(), 0..4).prop_map(WriteKind::Put),
        Just(WriteKind::Delete),
        Just(WriteKind::Rollback),
    ];
    prop_oneof![
        (column(), 1..8u64, lock).prop_map(|(column, t, lock)| Mutation::PutLock { column, start_ts: ts(t), lock }),
        (column(), 1..8u64).prop_map(|(column, t)| Mutation::DeleteLock { column, start_ts: ts(t) }),
        (column(), 1..8u64, prop::collection::vec(any::<u8>(), 0..4))
            .prop_map(|(column, t, value)| Mutation::PutData { column, start_ts: ts(t), value }),
        (column(), 1..8u64).prop_map(|(column, t)| Mutation::DeleteData { column, start_ts: ts(t) }),
        (column(), 1..8u64, 1..8u64, kind).prop_map(|(column, c, s, kind)| Mutation::PutWrite {
            column,
            commit_ts: ts(c),
            write: WriteRecord { start_ts: ts(s), kind }
        }),
        (column(), 1..8u64).prop_map(|(column, t)| Mutation::DeleteWrite { column, commit_ts: ts(t) }),
        (column(), 1..8u64, prop::option::of(writer())).prop_map(|(column, t, writer)| Mutation::SetNotify {
            column,
            ts: ts(t),
            writer
        }),
        (column(), 1..8u64).prop_map(|(column, t)| Mutation::DropNotifyWriter { column, start_ts: ts(t) }),
        (column(), 0..8u64).prop_map(|(column, t)| Mutation::ClearNotify { column, max_ts: ts(t) }),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..3usize, prop::collection::vec(condition(), 0..3), prop::collection::vec(mutation(), 0..4)).prop_map(
            |(r, conditions, mutations)| Op::Row(RowMutation {
                table: "t".into(),
                row: ROWS[r].to_vec(),
                conditions,
                mutations
            })
        ),
        1 => (0..3u8, prop::collection::vec(any::<u8>(), 0..3))
            .prop_map(|(k, value)| Op::MetaPut { key: format!("m/{k}"), value }),
        1 => (0..3u8).prop_map(|k| Op::MetaDelete { key: format!("m/{k}") }),
        // Counters: added to (wrapping near u64::MAX too) and deleted, never put.
        1 => (0..3u8, prop_oneof![0..1000u64, (u64::MAX - 1000)..=u64::MAX])
            .prop_map(|(k, delta)| Op::MetaAdd { key: format!("m/n{k}"), delta }),
        1 => (0..3u8).prop_map(|k| Op::MetaDelete { key: format!("m/n{k}") }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn redis_applies_row_operations_like_the_reference(calls in prop::collection::vec(prop::collection::vec(op(), 1..5), 1..12)) {
        if common::redis_nodes().is_none() {
            return Ok(());
        }
        let reference = MemBigtable::new();
        let redis = common::redis_backend();
        for ops in calls {
            let want = reference.apply(ops.clone()).unwrap();
            let got = redis.apply(ops.clone()).unwrap();
            prop_assert_eq!(got, want, "outcomes of {:?}", ops);
        }
        prop_assert_eq!(redis.scan_versions(None, 100).unwrap(), reference.scan_versions(None, 100).unwrap());
        prop_assert_eq!(redis.scan_notify(None, 100).unwrap(), reference.scan_notify(None, 100).unwrap());
        prop_assert_eq!(redis.meta_scan("m/").unwrap(), reference.meta_scan("m/").unwrap());
        for r in ROWS {
            for t in [1, 4, 8] {
                prop_assert_eq!(
                    redis.read_row("t", r, &COLUMNS, ts(t)).unwrap(),
                    reference.read_row("t", r, &COLUMNS, ts(t)).unwrap()
                );
                let cell = CellRef::new("t", r, "c:v");
                prop_assert_eq!(redis.find_write(&cell, ts(t)).unwrap(), reference.find_write(&cell, ts(t)).unwrap());
            }
            prop_assert_eq!(
                redis.scan(&range(r, None, 8, 100)).unwrap(),
                reference.scan(&range(r, None, 8, 100)).unwrap()
            );
        }
    }
}

/// A call of the differential test of atomic groups: ops one by one, or rows as one group.
#[derive(Clone, Debug)]
enum Call {
    Apply(Vec<Op>),
    Atomic(Vec<RowMutation>),
}

fn call() -> impl Strategy<Value = Call> {
    prop_oneof![
        prop::collection::vec(op(), 1..4).prop_map(Call::Apply),
        // Distinct rows: a subset of ROWS, each with its own conditions and mutations.
        (
            prop::sample::subsequence(vec![0usize, 1, 2], 1..=3),
            prop::collection::vec(
                (prop::collection::vec(condition(), 0..3), prop::collection::vec(mutation(), 0..4)),
                3
            )
        )
            .prop_map(|(rows, parts)| Call::Atomic(
                rows.into_iter()
                    .zip(parts)
                    .map(|(r, (conditions, mutations))| RowMutation {
                        table: "t".into(),
                        row: ROWS[r].to_vec(),
                        conditions,
                        mutations
                    })
                    .collect()
            )),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// `apply_atomic` on Redis (one bucket, so every row shares the atomic unit) applies all or
    /// nothing exactly like the in-memory reference.
    #[test]
    fn redis_applies_atomic_groups_like_the_reference(calls in prop::collection::vec(call(), 1..10)) {
        let Some(nodes) = common::redis_nodes() else { return Ok(()) };
        let reference = MemBigtable::new();
        let redis = RedisBigtable::open(RedisConfig {
            nodes,
            namespace: common::unique_namespace(),
            buckets: 1,
            ..RedisConfig::default()
        })
        .unwrap();
        for c in calls {
            match c {
                Call::Apply(ops) => {
                    prop_assert_eq!(redis.apply(ops.clone()).unwrap(), reference.apply(ops.clone()).unwrap(), "{:?}", ops);
                }
                Call::Atomic(rows) => {
                    prop_assert_eq!(
                        redis.apply_atomic(rows.clone()).unwrap(),
                        reference.apply_atomic(rows.clone()).unwrap(),
                        "{:?}",
                        rows
                    );
                }
            }
        }
        prop_assert_eq!(redis.scan_versions(None, 100).unwrap(), reference.scan_versions(None, 100).unwrap());
        prop_assert_eq!(redis.scan_notify(None, 100).unwrap(), reference.scan_notify(None, 100).unwrap());
    }
}

/// Every backend with atomic groups, each fresh: memory, redb in `dir`, and Redis (one bucket)
/// when a cluster is at hand.
fn atomic_backends(dir: &common::TempDir) -> Vec<Box<dyn Bigtable>> {
    let mut backends: Vec<Box<dyn Bigtable>> = vec![
        Box::new(MemBigtable::new()),
        Box::new(percolator_store::backends::RedbBigtable::open(dir.file("s.redb"), Default::default()).unwrap()),
    ];
    if let Some(nodes) = common::redis_nodes() {
        let namespace = common::unique_namespace();
        backends.push(Box::new(
            RedisBigtable::open(RedisConfig { nodes, namespace, buckets: 1, ..RedisConfig::default() }).unwrap(),
        ));
    }
    backends
}

/// Row `row` of table `t`: `c:v` staged at 1 as `v`, if `conditions` hold.
fn put(row: &[u8], conditions: Vec<Condition>) -> RowMutation {
    RowMutation {
        table: "t".into(),
        row: row.to_vec(),
        conditions,
        mutations: vec![Mutation::PutData { column: "c:v".into(), start_ts: ts(1), value: b"v".to_vec() }],
    }
}

/// Groups that are not one atomic unit of distinct rows are refused, on every backend that
/// has atomic groups; one failing condition applies nothing.
#[test]
fn atomic_groups_apply_all_or_nothing_and_are_checked() {
    let dir = common::TempDir::new("atomic-groups");
    let backends = atomic_backends(&dir);
    for b in &backends {
        // A lock on row a: the group's condition on it fails, so row b is not written either.
        b.apply(vec![Op::Row(RowMutation {
            table: "t".into(),
            row: b"a".to_vec(),
            conditions: vec![],
            mutations: vec![Mutation::PutLock {
                column: "c:v".into(),
                start_ts: ts(2),
                lock: LockRecord { primary: CellRef::new("t", "a", "c:v"), wall_ms: 0, ttl_ms: 0, worker: 0 },
            }],
        })])
        .unwrap();
        let got = b
            .apply_atomic(vec![put(b"b", vec![]), put(b"a", vec![Condition::NoLock { column: "c:v".into() }])])
            .unwrap();
        assert!(
            matches!(got, percolator_store::backends::AtomicOutcome::ConditionFailed { op: 1, index: 0, .. }),
            "{got:?}"
        );
        assert_eq!(b.read_data(&CellRef::new("t", "b", "c:v"), ts(1)).unwrap(), None, "nothing applied");
        let got = b.apply_atomic(vec![put(b"b", vec![]), put(b"c", vec![])]).unwrap();
        assert_eq!(got, percolator_store::backends::AtomicOutcome::Applied);
        assert_eq!(b.read_data(&CellRef::new("t", "c", "c:v"), ts(1)).unwrap(), Some(b"v".to_vec()));
        let twice = b.apply_atomic(vec![put(b"b", vec![]), put(b"b", vec![])]).unwrap_err();
        assert!(matches!(&twice, Error::InvalidArgument(m) if m.contains("twice")), "{twice}");
    }
    // Redis with several buckets: rows of different buckets are refused.
    if let Some(nodes) = common::redis_nodes() {
        let redis =
            RedisBigtable::open(RedisConfig { nodes, namespace: common::unique_namespace(), ..RedisConfig::default() })
                .unwrap();
        let rows: Vec<Vec<u8>> = (0..64u8).map(|i| vec![b'r', i]).collect();
        let other = rows.iter().find(|r| redis.bucket_of("t", r) != redis.bucket_of("t", &rows[0])).unwrap();
        let e = redis.apply_atomic(vec![put(&rows[0], vec![]), put(other, vec![])]).unwrap_err();
        assert!(matches!(&e, Error::InvalidArgument(m) if m.contains("atomic unit")), "{e}");
    }
}

/// `apply_atomic_then` applies its ops after the group, seeing its writes, and only if the
/// group applied; one row or several, on memory, redb (one group-commit submission) and Redis
/// (the default: two calls).
#[test]
fn apply_atomic_then_applies_its_ops_only_after_the_group() {
    use percolator_store::backends::{AtomicOutcome, Outcome};
    let lock = |row: &[u8]| RowMutation {
        table: "t".into(),
        row: row.to_vec(),
        conditions: vec![],
        mutations: vec![Mutation::PutLock {
            column: "c:v".into(),
            start_ts: ts(2),
            lock: LockRecord { primary: CellRef::new("t", row.to_vec(), "c:v"), wall_ms: 0, ttl_ms: 0, worker: 0 },
        }],
    };
    let no_lock = || vec![Condition::NoLock { column: "c:v".into() }];
    let data = |b: &dyn Bigtable, row: &[u8]| b.read_data(&CellRef::new("t", row.to_vec(), "c:v"), ts(1)).unwrap();
    let dir = common::TempDir::new("atomic-then");
    let backends = atomic_backends(&dir);
    for b in &backends {
        b.apply(vec![Op::Row(lock(b"a"))]).unwrap();
        // A group that fails (several rows, then one row): none of its ops is tried.
        for rows in [vec![put(b"b", vec![]), put(b"a", no_lock())], vec![put(b"a", no_lock())]] {
            let (got, outcomes) = b.apply_atomic_then(rows, vec![Op::Row(put(b"z", vec![]))]).unwrap();
            assert!(matches!(got, AtomicOutcome::ConditionFailed { index: 0, .. }), "{got:?}");
            assert_eq!(outcomes, None);
            assert_eq!((data(&**b, b"b"), data(&**b, b"z")), (None, None), "nothing applied");
        }
        // A group that applies: its ops follow it, each on its own; the first meets the
        // group's lock on c, the second applies.
        for (rows, row) in [(vec![lock(b"c"), put(b"d", vec![])], b"c"), (vec![lock(b"e")], b"e")] {
            let (got, outcomes) =
                b.apply_atomic_then(rows, vec![Op::Row(put(row, no_lock())), Op::Row(put(b"z", vec![]))]).unwrap();
            assert_eq!(got, AtomicOutcome::Applied);
            let outcomes = outcomes.expect("the ops were applied");
            assert!(
                matches!(outcomes[..], [Outcome::ConditionFailed { index: 0, .. }, Outcome::Applied]),
                "{outcomes:?}"
            );
            assert_eq!((data(&**b, row), data(&**b, b"z")), (None, Some(b"v".to_vec())));
        }
        assert_eq!(data(&**b, b"d"), Some(b"v".to_vec()));
    }
}

/// Scans merge every bucket in key order, across pages of every size.
#[test]
fn scans_merge_buckets_in_key_order() {
    let Some(nodes) = common::redis_nodes() else { return };
    let redis = RedisBigtable::open(RedisConfig {
        nodes,
        namespace: common::unique_namespace(),
        buckets: 7,
        ..RedisConfig::default()
    })
    .unwrap();
    let reference = MemBigtable::new();
    let ops: Vec<Op> = (0..300u32)
        .map(|i| {
            let row = format!("r{:04}", (i * 7919) % 300).into_bytes();
            Op::Row(RowMutation {
                table: "t".into(),
                row,
                conditions: vec![],
                mutations: vec![
                    Mutation::PutWrite {
                        column: "c:v".into(),
                        commit_ts: ts(2),
                        write: WriteRecord { start_ts: ts(1), kind: WriteKind::Put(i.to_be_bytes().to_vec()) },
                    },
                    Mutation::SetNotify { column: "c:v".into(), ts: ts(2), writer: None },
                ],
            })
        })
        .collect();
    reference.apply(ops.clone()).unwrap();
    redis.apply(ops).unwrap();
    assert_eq!(redis.bucket_count(), 7);
    for limit in [1, 5, 16, 17, 299, 300, 1000] {
        assert_eq!(
            redis.scan(&range(b"r0100", Some(b"r0250"), 3, limit)).unwrap(),
            reference.scan(&range(b"r0100", Some(b"r0250"), 3, limit)).unwrap(),
            "limit {limit}"
        );
        assert_eq!(redis.scan_notify(None, limit).unwrap(), reference.scan_notify(None, limit).unwrap());
    }
    let all = redis.scan(&range(b"", None, 3, 1000)).unwrap();
    assert_eq!(all.len(), 300);
    assert!(all.windows(2).all(|w| w[0].row < w[1].row));
    // An existing store keeps its bucket count, whatever the opener asks for.
    let again = RedisBigtable::open(RedisConfig {
        nodes: common::redis_nodes().unwrap(),
        namespace: redis_namespace_of(&redis),
        buckets: 3,
        ..RedisConfig::default()
    })
    .unwrap();
    assert_eq!(again.bucket_count(), 7);
}

fn redis_namespace_of(db: &RedisBigtable) -> String {
    db.namespace().to_string()
}

#[test]
fn bad_configurations_and_unreachable_clusters_are_named() {
    let err = |config: RedisConfig| match RedisBigtable::open(config) {
        Err(e) => e,
        Ok(_) => panic!("opened"),
    };
    let e = err(RedisConfig { nodes: vec![], ..RedisConfig::default() });
    assert!(matches!(&e, Error::InvalidArgument(m) if m.contains("seed node")), "{e}");
    let e = err(RedisConfig { nodes: vec!["127.0.0.1:1".into()], namespace: "a{b}".into(), ..RedisConfig::default() });
    assert!(matches!(&e, Error::InvalidArgument(m) if m.contains("braces")), "{e}");
    // Port 1 on loopback: refused at once.
    let e = err(RedisConfig {
        nodes: vec!["127.0.0.1:1".into()],
        connect_timeout: Duration::from_millis(500),
        ..RedisConfig::default()
    });
    assert!(matches!(&e, Error::Unavailable(m) if m.contains("127.0.0.1:1")), "{e}");
}

/// A namespace written by the version that kept cells in hashes (layout 1: a bucket count but
/// no layout) is refused with what to do, not misread.
#[test]
fn a_namespace_of_the_earlier_layout_is_refused() {
    let Some(nodes) = common::redis_nodes() else { return };
    let namespace = common::unique_namespace();
    let config = RedisConfig { nodes: nodes.clone(), namespace: namespace.clone(), ..RedisConfig::default() };
    drop(RedisBigtable::open(config.clone()).unwrap());
    // Make it look like layout 1: remove the layout, on whichever master serves the metadata.
    let meta = format!("{{{namespace}:meta}}cv");
    let removed = nodes.iter().any(|node| {
        let Ok(mut con) = redis::Client::open(format!("redis://{node}/")).and_then(|c| c.get_connection()) else {
            return false;
        };
        redis::cmd("HDEL").arg(&meta).arg("backend/redis/layout").query::<i64>(&mut con) == Ok(1)
    });
    assert!(removed, "no master removed the layout of {namespace}");
    match RedisBigtable::open(config) {
        Err(Error::InvalidArgument(m)) => assert!(m.contains("earlier version") && m.contains("new namespace"), "{m}"),
        other => panic!("expected a refusal, got {:?}", other.map(|_| "a backend")),
    }
}

/// A one-node Redis Cluster of this test's own (`redis-server` from `PATH`) on free loopback
/// ports, its files in a temp dir; stopped by PID when dropped.
struct OneNode {
    child: std::process::Child,
    dir: std::path::PathBuf,
    addr: String,
}

impl OneNode {
    fn start(name: &str) -> OneNode {
        let free = || std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let (port, bus) = (free(), free());
        let dir = std::env::temp_dir().join(format!("percolator-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let (port_s, bus_s) = (port.to_string(), bus.to_string());
        let child = std::process::Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &port_s, "--cluster-enabled", "yes", "--cluster-port", &bus_s])
            .args(["--cluster-config-file", "nodes.conf", "--save", "", "--appendonly", "no"])
            .args(["--maxmemory-policy", "noeviction", "--dir"])
            .arg(&dir)
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("starting redis-server");
        let node = OneNode { child, dir, addr: format!("127.0.0.1:{port}") };
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let mut con = loop {
            if let Ok(c) = redis::Client::open(format!("redis://{}/", node.addr)).and_then(|c| c.get_connection()) {
                break c;
            }
            assert!(std::time::Instant::now() < deadline, "redis-server on {} did not answer", node.addr);
            std::thread::sleep(Duration::from_millis(50));
        };
        let _: () = redis::cmd("CLUSTER").arg("ADDSLOTSRANGE").arg(0).arg(16383).query(&mut con).unwrap();
        loop {
            let info: String = redis::cmd("CLUSTER").arg("INFO").query(&mut con).unwrap();
            if info.contains("cluster_state:ok") {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "the one-node cluster never became ok: {info}");
            std::thread::sleep(Duration::from_millis(50));
        }
        node
    }

    fn cmd<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> T {
        let mut con = redis::Client::open(format!("redis://{}/", self.addr)).unwrap().get_connection().unwrap();
        cmd.query(&mut con).unwrap()
    }
}

impl Drop for OneNode {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A master at its `maxmemory` refuses writes (`OOM`): the backend says so as
/// [`Error::Unavailable`], the store's failure (an observer's run that meets it is no failure of
/// the observer, as on a full disk), naming the node; reads go on, and writes work again once
/// `maxmemory` is raised.
#[test]
fn a_master_out_of_memory_refuses_writes_as_unavailable_and_reads_go_on() {
    // Where the tests have a Redis Cluster, they have redis-server.
    if common::redis_nodes().is_none() {
        return;
    }
    let node = OneNode::start("oom");
    let db = RedisBigtable::open(RedisConfig {
        nodes: vec![node.addr.clone()],
        namespace: common::unique_namespace(),
        // One node, no replica to wait for.
        replicas: 0,
        ..RedisConfig::default()
    })
    .unwrap();
    let put = |i: u64| {
        let row = format!("r{i:05}").into_bytes();
        let value = common::noise(i, 64 << 10);
        let m = Mutation::PutData { column: "c:v".into(), start_ts: ts(i + 1), value };
        db.apply(vec![Op::Row(RowMutation { table: "t".into(), row, conditions: vec![], mutations: vec![m] })])
    };
    put(0).unwrap();
    let info: String = node.cmd(redis::cmd("INFO").arg("memory"));
    let used: u64 = info.lines().find_map(|l| l.strip_prefix("used_memory:")).unwrap().trim().parse().unwrap();
    let _: () = node.cmd(redis::cmd("CONFIG").arg("SET").arg("maxmemory").arg(used + (2 << 20)));
    let refused = (1..200u64).find_map(|i| put(i).err()).expect("2 MiB more than in use never filled");
    match &refused {
        Error::Unavailable(m) => assert!(m.contains("out of memory") && m.contains(&node.addr), "{m}"),
        e => panic!("expected Error::Unavailable, got {e}"),
    }
    assert!(refused.is_storage_failure(), "the store's failure, not the caller's");
    let first = CellRef::new("t", b"r00000".as_slice(), "c:v");
    assert_eq!(db.read_data(&first, ts(1)).unwrap(), Some(common::noise(0, 64 << 10)), "reads go on");
    let _: () = node.cmd(redis::cmd("CONFIG").arg("SET").arg("maxmemory").arg(0));
    put(1000).unwrap();
}
