//! The distributed backend: a Redis Cluster as the Bigtable.
//!
//! Rows are spread over a fixed number of **buckets** (FNV-1a of the row key, modulo the bucket
//! count chosen when the store is created). Every key of a bucket carries the same hash tag
//! `{<namespace>:<bucket>}`, so the bucket lives in one cluster slot, and a row operation (or a
//! batch of them) is one atomic call of the `percolator_apply` function (`percolator.lua`) that
//! checks the conditions and applies the mutations server-side: the paper's conditional row
//! mutation in one round trip. A bucket holds two sorted sets (score 0, ordered bytewise) whose
//! members are key ‖ value: the cells (the same version keys as redb's `cells` table,
//! [`keys`](percolator_store::backends::keys)) and the notify cells; no key is a prefix of another, so members sort by key
//! and a plain `ZRANGE BYLEX` reads keys with their values. Metadata lives under
//! `{<namespace>:meta}`, a sorted set of keys beside a hash of values (its keys are free-form).
//!
//! Reads run the same code as the embedded backends (`cells.rs`) over a view of one bucket, or,
//! for scans, a merge of every bucket's ordered stream (a scan costs one round trip per bucket
//! per page, the price of ordered scans over a hash-partitioned store; see `docs/design.md`,
//! "The Redis backend"). Reads go to masters only: a replica may lag, and a snapshot must see
//! every commit acknowledged before its start timestamp.
//!
//! A commit is answered after the master applied it (and, with `appendfsync always`, wrote it
//! to its append-only file) and `WAIT` saw the configured number of replicas receive it.

mod cluster;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;

use redis::{Cmd, Value};

use self::cluster::{Cluster, Timeouts, describe, slot_of_tag};
use percolator_store::backends::cells::{self, KvRead, Visitor};
use percolator_store::backends::codec::{decode_lock, encode_lock, encode_write, encode_writer};
use percolator_store::backends::keys::{Kind, cell_prefix, decode_version_key, row_prefix, version_key};
use percolator_store::backends::*;
use percolator_store::{CellRef, Timestamp};
use percolator_store::{Error, Result};

/// The server-side functions, loaded on every master when the backend opens.
const LIBRARY: &str = include_str!("percolator.lua");

/// Most buckets a store may have (every ordered scan reads each of them).
const MAX_BUCKETS: u32 = 4096;

/// Where the bucket count of a store is recorded (in its metadata hash).
const BUCKETS_KEY: &str = "backend/redis/buckets";

/// Metadata key of the namespace's layout ([`LAYOUT`]).
const LAYOUT_KEY: &str = "backend/redis/layout";

/// The layout this version reads and writes: 2, cells and notify cells packed as key ‖ value
/// members of one sorted set per bucket (1, before: a sorted set of keys beside a hash).
const LAYOUT: &str = "2";

/// Settings of the Redis backend.
#[derive(Clone, Debug)]
pub struct RedisConfig {
    /// Seed nodes of the cluster, `host:port`; any one that answers is enough to find the rest.
    pub nodes: Vec<String>,
    /// Prefix of every key this store writes: several stores can share one cluster.
    pub namespace: String,
    /// Buckets rows are spread over, fixed when the store is created (an existing store keeps
    /// its own count). More buckets spread a table over more slots (and so masters); every
    /// ordered scan reads every bucket.
    pub buckets: u32,
    /// Replicas that must have each commit before it is answered (`WAIT`); 0 answers after
    /// the master alone.
    pub replicas: u32,
    /// How long a commit waits for those replicas before failing (its outcome then unknown).
    pub replica_timeout: Duration,
    /// When a master has fewer connected replicas than `replicas` (it lost one: its replica
    /// was promoted when a master died, or a replica is down), wait for the replicas it has
    /// instead of failing every commit on its slots until one is back. Trades durability for
    /// availability while degraded: such commits survive the master process but not the loss
    /// of its machine. Off by default.
    pub degraded_writes: bool,
    /// Connecting to one node.
    pub connect_timeout: Duration,
    /// One request on an open connection.
    pub io_timeout: Duration,
    /// How long requests the cluster refused (a failover in progress, a node down) are retried.
    pub retry_for: Duration,
}

impl Default for RedisConfig {
    fn default() -> RedisConfig {
        RedisConfig {
            nodes: Vec::new(),
            namespace: "percolator".into(),
            buckets: 16,
            replicas: 1,
            replica_timeout: Duration::from_secs(2),
            degraded_writes: false,
            connect_timeout: Duration::from_secs(2),
            io_timeout: Duration::from_secs(10),
            retry_for: Duration::from_secs(15),
        }
    }
}

/// The keys of one bucket (or of the metadata), all under one hash tag.
struct Bucket {
    slot: u16,
    cells_z: String,
    cells_h: String,
    notify_z: String,
    notify_h: String,
    /// Prefix of the scanners' row lock keys (the row key follows).
    row_lock: String,
}

impl Bucket {
    fn new(tag: &str) -> Bucket {
        Bucket {
            slot: slot_of_tag(tag),
            cells_z: format!("{{{tag}}}c"),
            cells_h: format!("{{{tag}}}cv"),
            notify_z: format!("{{{tag}}}n"),
            notify_h: format!("{{{tag}}}nv"),
            row_lock: format!("{{{tag}}}r"),
        }
    }
}

/// [`Bigtable`] over a Redis Cluster. See the module docs.
pub struct RedisBigtable {
    cluster: Arc<Cluster>,
    /// Buckets whose notify cells were set, for the thread that publishes wakeups.
    wakes: mpsc::Sender<u32>,
    config: RedisConfig,
    buckets: Vec<Bucket>,
    meta: Bucket,
    commits: AtomicU64,
    ops: AtomicU64,
}

impl RedisBigtable {
    /// Connects to the cluster, loads the function library on every master, and opens the
    /// store under `config.namespace` (creating it with `config.buckets` buckets if new).
    pub fn open(config: RedisConfig) -> Result<RedisBigtable> {
        if config.namespace.is_empty() || config.namespace.contains(['{', '}']) {
            return Err(Error::InvalidArgument(format!(
                "Redis namespace {:?} must be non-empty and contain no braces",
                config.namespace
            )));
        }
        if !(1..=MAX_BUCKETS).contains(&config.buckets) {
            return Err(Error::InvalidArgument(format!(
                "Redis bucket count {} is out of range (1 to {MAX_BUCKETS})",
                config.buckets
            )));
        }
        let timeouts = Timeouts {
            connect: config.connect_timeout,
            io: config.io_timeout,
            retry_for: config.retry_for,
            degraded_writes: config.degraded_writes,
        };
        let mut library = redis::cmd("FUNCTION");
        library.arg("LOAD").arg("REPLACE").arg(LIBRARY);
        let cluster = Arc::new(Cluster::connect(&config.nodes, timeouts, library)?);
        let meta = Bucket::new(&format!("{}:meta", config.namespace));
        let (wakes, pending) = mpsc::channel();
        spawn_publisher(cluster.clone(), wake_channel(&config.namespace), meta.slot, pending);
        let mut db = RedisBigtable {
            cluster,
            wakes,
            config,
            buckets: Vec::new(),
            meta,
            commits: AtomicU64::new(0),
            ops: AtomicU64::new(0),
        };
        // The layout: a namespace made before cells were packed into sorted-set members has a
        // bucket count but no layout, and cannot be read by this version. A new namespace gets
        // its layout before its bucket count, so a count without a layout is always an old one.
        let mut get = redis::cmd("HMGET");
        get.arg(&db.meta.cells_h).arg(LAYOUT_KEY).arg(BUCKETS_KEY);
        if let Value::Array(found) = db.cluster.call(db.meta.slot, get, true)? {
            match (found.first(), found.get(1)) {
                (Some(Value::Nil), Some(Value::BulkString(_))) => {
                    return Err(Error::InvalidArgument(format!(
                        "Redis namespace {:?} was created by an earlier version of percolator (cells in hashes, \
                         layout 1); this version reads layout {LAYOUT} only: use a new namespace",
                        db.config.namespace
                    )));
                }
                (Some(Value::BulkString(l)), _) if l.as_slice() != LAYOUT.as_bytes() => {
                    return Err(Error::InvalidArgument(format!(
                        "Redis namespace {:?} has layout {}; this version reads layout {LAYOUT} only",
                        db.config.namespace,
                        String::from_utf8_lossy(l)
                    )));
                }
                _ => {}
            }
        }
        let mut set = redis::cmd("HSETNX");
        set.arg(&db.meta.cells_h).arg(LAYOUT_KEY).arg(LAYOUT);
        db.cluster.call(db.meta.slot, set, true)?;
        // The first opener fixes the bucket count (HSETNX); everyone reads the winner's.
        let mut set = redis::cmd("HSETNX");
        set.arg(&db.meta.cells_h).arg(BUCKETS_KEY).arg(db.config.buckets.to_string());
        db.cluster.call(db.meta.slot, set, true)?;
        let count = match db.meta_get(BUCKETS_KEY)? {
            Some(v) => String::from_utf8_lossy(&v).parse::<u32>().ok().filter(|n| (1..=MAX_BUCKETS).contains(n)),
            None => None,
        }
        .ok_or_else(|| {
            Error::Corrupt(format!("{BUCKETS_KEY} of namespace {:?} is not a count", db.config.namespace))
        })?;
        db.buckets = (0..count).map(|b| Bucket::new(&format!("{}:{b}", db.config.namespace))).collect();
        Ok(db)
    }

    /// The masters serving the store now.
    pub fn masters(&self) -> Vec<String> {
        self.cluster.masters()
    }

    /// The namespace of this store's keys.
    pub fn namespace(&self) -> &str {
        &self.config.namespace
    }

    /// The bucket count of this store.
    pub fn bucket_count(&self) -> u32 {
        self.buckets.len() as u32
    }

    /// The bucket (notify partition) of a row.
    pub fn bucket_of(&self, table: &str, row: &[u8]) -> u32 {
        self.bucket_index(table, row) as u32
    }

    /// The index of a row's bucket.
    fn bucket_index(&self, table: &str, row: &[u8]) -> usize {
        self.bucket_of_key(&row_prefix(table, row))
    }

    /// The bucket of a row given its row key (`key::row_prefix`).
    fn bucket_of_key(&self, row_key: &[u8]) -> usize {
        (fnv1a(row_key) % self.buckets.len() as u64) as usize
    }

    fn bucket(&self, table: &str, row: &[u8]) -> &Bucket {
        &self.buckets[self.bucket_index(table, row)]
    }

    fn cells_view<'a>(&'a self, b: &'a Bucket) -> Zset<'a> {
        Zset { db: self, slot: b.slot, z: &b.cells_z, layout: Layout::Cells }
    }

    fn notify_view<'a>(&'a self, b: &'a Bucket) -> Zset<'a> {
        Zset { db: self, slot: b.slot, z: &b.notify_z, layout: Layout::Notify }
    }

    fn meta_view(&self) -> Zset<'_> {
        Zset { db: self, slot: self.meta.slot, z: &self.meta.cells_z, layout: Layout::Hashed(&self.meta.cells_h) }
    }

    fn merged_cells(&self) -> Merged<'_> {
        Merged(self.buckets.iter().map(|b| self.cells_view(b)).collect())
    }

    fn merged_notify(&self) -> Merged<'_> {
        Merged(self.buckets.iter().map(|b| self.notify_view(b)).collect())
    }

    /// One `percolator_apply` call: a bucket's (2 keys: packed sorted sets) or the metadata's
    /// (4 keys: sorted sets of keys beside hashes of values).
    fn apply_cmd(&self, b: &Bucket, meta: bool, rows: &[&RowArgs]) -> Cmd {
        let mut c = redis::cmd("FCALL");
        c.arg("percolator_apply");
        if meta {
            c.arg(4).arg(&b.cells_z).arg(&b.cells_h).arg(&b.notify_z).arg(&b.notify_h);
        } else {
            c.arg(2).arg(&b.cells_z).arg(&b.notify_z);
        }
        c.arg(rows.len());
        for r in rows {
            c.arg(r.conditions).arg(r.mutations);
            for a in &r.args {
                c.arg(a.as_slice());
            }
        }
        c
    }
}

/// The pub/sub channel of a namespace's wakeups (its messages are bucket numbers).
fn wake_channel(namespace: &str) -> String {
    format!("percolator:{namespace}:wake")
}

/// Publishes the buckets `wake` queues on `channel`, a burst as one `PUBLISH` per bucket, until
/// the backend (the sender) is dropped. Through any master: Redis Cluster forwards a message
/// to every node, and a subscriber on any node receives it.
fn spawn_publisher(cluster: Arc<Cluster>, channel: String, slot: u16, pending: mpsc::Receiver<u32>) {
    std::thread::Builder::new()
        .name("percolator-redis-wake".into())
        .spawn(move || {
            while let Ok(first) = pending.recv() {
                let mut buckets = std::collections::BTreeSet::from([first]);
                buckets.extend(pending.try_iter());
                let cmds = buckets
                    .into_iter()
                    .map(|b| {
                        let mut c = redis::cmd("PUBLISH");
                        c.arg(&channel).arg(b);
                        (slot, c)
                    })
                    .collect();
                if let Err(e) = cluster.batch(cmds, true, None) {
                    tracing::debug!(error = %e, "publishing a scanner wakeup failed (scanners look again by themselves)");
                }
            }
        })
        .expect("spawning the Redis wakeup publisher thread");
}

/// Subscribes to `channel` on the first node of `nodes` that answers and calls `on_wake` per
/// message until `stop`; reconnects (to the next node) when the connection breaks.
fn watch(nodes: Vec<String>, channel: String, on_wake: Box<dyn Fn() + Send>, stop: Arc<AtomicBool>) {
    let mut next = 0usize;
    let mut failing = false;
    while !stop.load(Ordering::SeqCst) {
        let node = &nodes[next % nodes.len()];
        next += 1;
        let result = (|| -> redis::RedisResult<()> {
            let client = redis::Client::open(format!("redis://{node}/"))?;
            let mut con = client.get_connection_with_timeout(Duration::from_secs(2))?;
            let mut pubsub = con.as_pubsub();
            pubsub.set_read_timeout(Some(Duration::from_millis(200)))?;
            pubsub.subscribe(&channel)?;
            if std::mem::take(&mut failing) {
                tracing::info!(%node, "scanner wakeups: subscribed again");
            }
            // A missed wakeup while (re)connecting only delays work until the scanners' next look.
            on_wake();
            while !stop.load(Ordering::SeqCst) {
                match pubsub.get_message() {
                    Ok(_) => on_wake(),
                    Err(e) if e.is_timeout() => {}
                    Err(e) => return Err(e),
                }
            }
            Ok(())
        })();
        if let Err(e) = result {
            if !std::mem::replace(&mut failing, true) {
                tracing::warn!(%node, error = %e, "scanner wakeups: the subscription failed; trying the next node");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// FNV-1a, 64 bits: the bucket of a row. Stable across versions and platforms (the bucket of
/// a stored row must never change).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3))
}

/// One row operation as `percolator_apply` arguments.
struct RowArgs {
    conditions: usize,
    mutations: usize,
    args: Vec<Vec<u8>>,
}

fn ts_be(ts: Timestamp) -> Vec<u8> {
    ts.raw().to_be_bytes().to_vec()
}

fn row_args(m: &RowMutation) -> RowArgs {
    let vk = |column: &str, kind: Kind, ts: Timestamp| version_key(&cell_prefix(&m.table, &m.row, column), kind, ts);
    let mut args: Vec<Vec<u8>> = Vec::new();
    for c in &m.conditions {
        match c {
            Condition::NoLock { column } => args.extend([
                b"L".to_vec(),
                vk(column, Kind::Lock, Timestamp::MAX),
                vk(column, Kind::Lock, Timestamp::ZERO),
            ]),
            Condition::NoWriteSince { column, since } => {
                args.extend([b"W".to_vec(), vk(column, Kind::Write, Timestamp::MAX), vk(column, Kind::Write, *since)])
            }
            Condition::LockAbsent { column, start_ts } => {
                args.extend([b"A".to_vec(), vk(column, Kind::Lock, *start_ts)])
            }
            Condition::LockIs { column, start_ts } => args.extend([b"I".to_vec(), vk(column, Kind::Lock, *start_ts)]),
        }
    }
    for mu in &m.mutations {
        let put = |key: Vec<u8>, value: Vec<u8>| [b"P".to_vec(), key, value];
        match mu {
            Mutation::PutLock { column, start_ts, lock } => {
                args.extend(put(vk(column, Kind::Lock, *start_ts), encode_lock(lock)))
            }
            Mutation::DeleteLock { column, start_ts } => {
                args.extend([b"D".to_vec(), vk(column, Kind::Lock, *start_ts)])
            }
            Mutation::PutData { column, start_ts, value } => {
                args.extend(put(vk(column, Kind::Data, *start_ts), value.clone()))
            }
            Mutation::DeleteData { column, start_ts } => {
                args.extend([b"D".to_vec(), vk(column, Kind::Data, *start_ts)])
            }
            Mutation::PutWrite { column, commit_ts, write } => {
                args.extend(put(vk(column, Kind::Write, *commit_ts), encode_write(write)))
            }
            Mutation::DeleteWrite { column, commit_ts } => {
                args.extend([b"D".to_vec(), vk(column, Kind::Write, *commit_ts)])
            }
            Mutation::SetNotify { column, ts, writer } => {
                let (start, blob) = match writer {
                    Some(w) => (w.start_ts.raw().to_le_bytes().to_vec(), encode_writer(w)),
                    None => (Vec::new(), Vec::new()),
                };
                args.extend([b"N".to_vec(), cell_prefix(&m.table, &m.row, column), ts_be(*ts), start, blob])
            }
            Mutation::DropNotifyWriter { column, start_ts } => args.extend([
                b"X".to_vec(),
                cell_prefix(&m.table, &m.row, column),
                start_ts.raw().to_le_bytes().to_vec(),
            ]),
            Mutation::ClearNotify { column, max_ts } => {
                args.extend([b"C".to_vec(), cell_prefix(&m.table, &m.row, column), ts_be(*max_ts)])
            }
        }
    }
    RowArgs { conditions: m.conditions.len(), mutations: m.mutations.len(), args }
}

/// A metadata operation as a row operation on the metadata bucket's cells.
fn meta_args(op: &Op) -> Option<RowArgs> {
    let args = match op {
        Op::MetaPut { key, value } => vec![b"P".to_vec(), key.as_bytes().to_vec(), value.clone()],
        Op::MetaDelete { key } => vec![b"D".to_vec(), key.as_bytes().to_vec()],
        Op::MetaAdd { key, delta } => vec![b"+".to_vec(), key.as_bytes().to_vec(), delta.to_le_bytes().to_vec()],
        Op::Row(_) => return None,
    };
    Some(RowArgs { conditions: 0, mutations: 1, args })
}

fn bytes(v: &Value) -> Option<&[u8]> {
    match v {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.as_bytes()),
        _ => None,
    }
}

/// Decodes one row's answer from `percolator_apply`.
fn outcome(v: &Value) -> Result<Outcome> {
    let bad = || Error::Storage(format!("percolator_apply answered {}", describe(v)));
    let items = match v {
        Value::Int(0) => return Ok(Outcome::Applied),
        Value::Array(items) => items,
        _ => return Err(bad()),
    };
    let index = match items.first() {
        Some(Value::Int(i)) if *i >= 0 => *i as usize,
        _ => return Err(bad()),
    };
    let key_ts =
        |k: Option<&Value>| -> Result<Timestamp> { Ok(decode_version_key(k.and_then(bytes).ok_or_else(bad)?)?.ts) };
    let found = match items.get(1).and_then(bytes) {
        Some(b"lock") => Found::Lock {
            start_ts: key_ts(items.get(2))?,
            lock: decode_lock(items.get(3).and_then(bytes).ok_or_else(bad)?)?,
        },
        Some(b"write") => Found::Write { commit_ts: key_ts(items.get(2))? },
        Some(b"nolock") => Found::NoLock,
        Some(b"lockpresent") => Found::LockPresent,
        _ => return Err(bad()),
    };
    Ok(Outcome::ConditionFailed { index, found })
}

/// Row operations per atomic call: each call is one step on its master, so a bounded size
/// keeps other clients' latency bounded.
const ROWS_PER_CALL: usize = 256;

impl Bigtable for RedisBigtable {
    fn apply(&self, ops: Vec<Op>) -> Result<Vec<Outcome>> {
        if ops.is_empty() {
            return Ok(Vec::new());
        }
        // Group by bucket (None: the metadata), keeping each bucket's ops in order.
        let mut groups: BTreeMap<Option<usize>, Vec<(usize, RowArgs)>> = BTreeMap::new();
        for (i, op) in ops.iter().enumerate() {
            let (bucket, args) = match op {
                Op::Row(m) => (Some(self.bucket_index(&m.table, &m.row)), row_args(m)),
                other => (None, meta_args(other).expect("metadata op")),
            };
            groups.entry(bucket).or_default().push((i, args));
        }
        let mut cmds = Vec::new();
        let mut targets: Vec<Vec<usize>> = Vec::new();
        for (bucket, rows) in &groups {
            let b = match bucket {
                Some(b) => &self.buckets[*b],
                None => &self.meta,
            };
            for chunk in rows.chunks(ROWS_PER_CALL) {
                let args: Vec<&RowArgs> = chunk.iter().map(|(_, a)| a).collect();
                cmds.push((b.slot, self.apply_cmd(b, bucket.is_none(), &args)));
                targets.push(chunk.iter().map(|(i, _)| *i).collect());
            }
        }
        let calls = cmds.len() as u64;
        let wait = (self.config.replicas > 0).then_some((self.config.replicas, self.config.replica_timeout));
        let answers = self.cluster.batch(cmds, false, wait)?;
        self.commits.fetch_add(calls, Ordering::Relaxed);
        self.ops.fetch_add(ops.len() as u64, Ordering::Relaxed);
        let mut out: Vec<Option<Outcome>> = vec![None; ops.len()];
        for (answer, indices) in answers.iter().zip(targets) {
            let Value::Array(rows) = answer else {
                return Err(Error::Storage(format!("percolator_apply failed: {}", describe(answer))));
            };
            if rows.len() != indices.len() {
                return Err(Error::Storage(format!(
                    "percolator_apply answered {} of {} row operations",
                    rows.len(),
                    indices.len()
                )));
            }
            for (v, i) in rows.iter().zip(indices) {
                out[i] = Some(outcome(v)?);
            }
        }
        Ok(out.into_iter().map(|o| o.expect("every op has an answer")).collect())
    }

    fn read_row(&self, table: &str, row: &[u8], columns: &[&str], ts: Timestamp) -> Result<Vec<CellRead>> {
        cells::read_row(&self.cells_view(self.bucket(table, row)), table, row, columns, ts)
    }

    fn find_write(&self, cell: &CellRef, start_ts: Timestamp) -> Result<Option<(Timestamp, WriteRecord)>> {
        cells::find_write(&self.cells_view(self.bucket(&cell.table, &cell.row)), cell, start_ts)
    }

    fn read_data(&self, cell: &CellRef, start_ts: Timestamp) -> Result<Option<Vec<u8>>> {
        cells::read_data(&self.cells_view(self.bucket(&cell.table, &cell.row)), cell, start_ts)
    }

    fn scan(&self, range: &ScanRange<'_>) -> Result<Vec<ScannedCell>> {
        if cells::one_row_prefix(range).is_some() {
            // One row's cells live in its bucket: no need to merge every bucket.
            return cells::scan(&self.cells_view(self.bucket(range.table, range.start)), range);
        }
        cells::scan(&self.merged_cells(), range)
    }

    fn scan_versions(&self, from: Option<(&str, &[u8])>, limit: usize) -> Result<Vec<RowVersions>> {
        cells::scan_versions(&self.merged_cells(), from, limit)
    }

    fn scan_notify(&self, from: Option<&[u8]>, limit: usize) -> Result<Vec<NotifyEntry>> {
        cells::scan_notify(&self.merged_notify(), from, limit)
    }

    fn meta_get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        self.meta_view().get(key.as_bytes())
    }

    fn meta_scan(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>> {
        cells::meta_scan(&self.meta_view(), prefix)
    }

    fn exclusive(&self) -> bool {
        false
    }

    fn stats(&self) -> BackendStats {
        BackendStats {
            commits: self.commits.load(Ordering::Relaxed),
            ops: self.ops.load(Ordering::Relaxed),
            ..BackendStats::default()
        }
    }

    fn atomic_unit(&self, table: &str, row: &[u8]) -> Option<u64> {
        // A bucket is one hash tag, so one slot on one master: one function call is atomic.
        Some(self.bucket_index(table, row) as u64)
    }

    fn apply_atomic(&self, rows: Vec<RowMutation>) -> Result<AtomicOutcome> {
        check_atomic_group(self, &rows)?;
        let Some(first) = rows.first() else { return Ok(AtomicOutcome::Applied) };
        let b = self.bucket(&first.table, &first.row);
        let args: Vec<RowArgs> = rows.iter().map(row_args).collect();
        let mut c = redis::cmd("FCALL");
        c.arg("percolator_apply_atomic").arg(2).arg(&b.cells_z).arg(&b.notify_z).arg(args.len());
        for r in &args {
            c.arg(r.conditions).arg(r.mutations);
            for a in &r.args {
                c.arg(a.as_slice());
            }
        }
        let wait = (self.config.replicas > 0).then_some((self.config.replicas, self.config.replica_timeout));
        let answer = self.cluster.batch(vec![(b.slot, c)], false, wait)?.pop().unwrap_or(Value::Nil);
        self.commits.fetch_add(1, Ordering::Relaxed);
        self.ops.fetch_add(rows.len() as u64, Ordering::Relaxed);
        match &answer {
            Value::Int(0) => Ok(AtomicOutcome::Applied),
            Value::Array(items) => match (items.first(), items.get(1)) {
                (Some(Value::Int(op)), Some(failed)) if *op >= 0 => match outcome(failed)? {
                    Outcome::ConditionFailed { index, found } => {
                        Ok(AtomicOutcome::ConditionFailed { op: *op as usize, index, found })
                    }
                    Outcome::Applied => {
                        Err(Error::Storage(format!("percolator_apply_atomic answered {}", describe(&answer))))
                    }
                },
                _ => Err(Error::Storage(format!("percolator_apply_atomic answered {}", describe(&answer)))),
            },
            other => Err(Error::Storage(format!("percolator_apply_atomic answered {}", describe(other)))),
        }
    }

    fn notify_partitions(&self) -> u32 {
        self.buckets.len() as u32
    }

    fn scan_notify_partition(&self, partition: u32, from: Option<&[u8]>, limit: usize) -> Result<Vec<NotifyEntry>> {
        let b = self.buckets.get(partition as usize).ok_or_else(|| {
            Error::InvalidArgument(format!("notify partition {partition} of {} buckets", self.buckets.len()))
        })?;
        cells::scan_notify(&self.notify_view(b), from, limit)
    }

    fn try_lock_row(&self, row_key: &[u8], owner: u64, ttl: Duration) -> Result<bool> {
        let b = &self.buckets[self.bucket_of_key(row_key)];
        let mut key = b.row_lock.as_bytes().to_vec();
        key.extend_from_slice(row_key);
        let mut set = redis::cmd("SET");
        set.arg(key).arg(owner).arg("NX").arg("PX").arg(ttl.as_millis().max(1) as u64);
        // Not idempotent: a SET whose answer was lost may have taken the lock (it then expires).
        Ok(self.cluster.call(b.slot, set, false)? != Value::Nil)
    }

    fn unlock_row(&self, row_key: &[u8], owner: u64) -> Result<()> {
        let b = &self.buckets[self.bucket_of_key(row_key)];
        let mut key = b.row_lock.as_bytes().to_vec();
        key.extend_from_slice(row_key);
        let mut c = redis::cmd("FCALL");
        c.arg("percolator_unlock_row").arg(1).arg(key).arg(owner);
        self.cluster.call(b.slot, c, true)?;
        Ok(())
    }

    fn wake(&self, row_keys: &[Vec<u8>]) {
        for k in row_keys {
            // Only fails once the publisher thread is gone, i.e. never while `self` lives.
            let _ = self.wakes.send(self.bucket_of_key(k) as u32);
        }
    }

    fn watch_wakes(&self, on_wake: Box<dyn Fn() + Send>, stop: Arc<AtomicBool>) {
        let (nodes, channel) = (self.config.nodes.clone(), wake_channel(&self.config.namespace));
        std::thread::Builder::new()
            .name("percolator-redis-watch".into())
            .spawn(move || watch(nodes, channel, on_wake, stop))
            .expect("spawning the Redis wakeup subscriber thread");
    }
}

// ---- reads: the ordered-map views `cells.rs` runs on ----------------------------------------

/// One sorted set of one bucket (or of the metadata), read in pages.
struct Zset<'a> {
    db: &'a RedisBigtable,
    slot: u16,
    z: &'a str,
    layout: Layout<'a>,
}

/// How a sorted set holds values.
#[derive(Clone, Copy)]
enum Layout<'a> {
    /// Members are cell version keys followed by their values: three `key::enc` components and
    /// 9 fixed bytes of key.
    Cells,
    /// Members are notify keys (three `key::enc` components) followed by their values.
    Notify,
    /// Members are keys; the values are in this hash (the metadata, whose keys are free-form).
    Hashed(&'a str),
}

/// First page of a range read; later pages double up to [`MAX_PAGE`].
const FIRST_PAGE: usize = 16;
const MAX_PAGE: usize = 1024;

/// The length of the key at the front of a packed member: `parts` order-preserving components
/// (`key::enc`: bytes with 0 escaped as 0 0xFF, ended by 0 1), then `tail` fixed bytes.
fn key_len(member: &[u8], parts: usize, tail: usize) -> Option<usize> {
    let mut i = 0;
    for _ in 0..parts {
        loop {
            let zero = i + member.get(i..)?.iter().position(|&b| b == 0)?;
            i = zero + 2;
            match member.get(zero + 1)? {
                1 => break,
                0xFF => {}
                _ => return None,
            }
        }
    }
    (i + tail <= member.len()).then_some(i + tail)
}

/// A page of a range read: its (key, value) pairs, and where the next page starts (exclusive)
/// if this one was full.
type Page = (Vec<(Vec<u8>, Vec<u8>)>, Option<Vec<u8>>);

impl Zset<'_> {
    /// Reads up to `limit` entries from `from` (inclusive, or exclusive: a cursor a page
    /// returned) to `to` (exclusive): a plain `ZRANGE BYLEX` of a packed set, the
    /// `percolator_range` function (sorted set + hash) for the metadata.
    fn range_cmd(&self, from: &[u8], inclusive: bool, to: Option<&[u8]>, limit: usize) -> Cmd {
        let mut lo = vec![if inclusive { b'[' } else { b'(' }];
        lo.extend_from_slice(from);
        let hi = match to {
            Some(to) => {
                let mut hi = vec![b'('];
                hi.extend_from_slice(to);
                hi
            }
            None => b"+".to_vec(),
        };
        match self.layout {
            Layout::Hashed(h) => {
                let mut c = redis::cmd("FCALL_RO");
                c.arg("percolator_range").arg(2).arg(self.z).arg(h).arg(lo).arg(hi).arg(limit);
                c
            }
            Layout::Cells | Layout::Notify => {
                let mut c = redis::cmd("ZRANGE");
                c.arg(self.z).arg(lo).arg(hi).arg("BYLEX").arg("LIMIT").arg(0).arg(limit);
                c
            }
        }
    }

    /// Splits a packed member into key and value.
    fn split(&self, mut member: Vec<u8>) -> Result<(Vec<u8>, Vec<u8>)> {
        let n = match self.layout {
            Layout::Cells => key_len(&member, 3, 9),
            Layout::Notify => key_len(&member, 3, 0),
            Layout::Hashed(_) => None,
        }
        .ok_or_else(|| Error::Corrupt(format!("Redis member {member:02x?} of {} holds no key", self.z)))?;
        let value = member.split_off(n);
        Ok((member, value))
    }

    /// Decodes an answer of [`Zset::range_cmd`] with `limit`.
    fn page(&self, v: Value, limit: usize) -> Result<Page> {
        let Layout::Hashed(_) = self.layout else {
            let Value::Array(items) = v else {
                return Err(Error::Storage(format!("ZRANGE answered {}", describe(&v))));
            };
            let full = items.len() == limit;
            let mut out = Vec::with_capacity(items.len());
            let mut last = None;
            for item in items {
                let Value::BulkString(member) = item else {
                    return Err(Error::Storage(format!("ZRANGE answered a member {}", describe(&item))));
                };
                if full {
                    last = Some(member.clone());
                }
                out.push(self.split(member)?);
            }
            return Ok((out, last));
        };
        let got = entries(v)?;
        let next = if got.len() == limit { got.last().map(|(k, _)| k.clone()) } else { None };
        Ok((got, next))
    }
}

/// Decodes a `percolator_range` answer into (key, value) pairs.
fn entries(v: Value) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let Value::Array(items) = v else {
        return Err(Error::Storage(format!("percolator_range answered {}", describe(&v))));
    };
    let mut out = Vec::with_capacity(items.len() / 2);
    let mut it = items.into_iter();
    while let (Some(k), Some(v)) = (it.next(), it.next()) {
        match (k, v) {
            (Value::BulkString(k), Value::BulkString(v)) => out.push((k, v)),
            (Value::BulkString(k), _) => {
                return Err(Error::Corrupt(format!("Redis key {k:02x?} is in a sorted set without a value")));
            }
            (k, _) => return Err(Error::Storage(format!("percolator_range answered a key {}", describe(&k)))),
        }
    }
    Ok(out)
}

impl KvRead for Zset<'_> {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        if let Layout::Hashed(h) = self.layout {
            let mut c = redis::cmd("HGET");
            c.arg(h).arg(key);
            return match self.db.cluster.call(self.slot, c, true)? {
                Value::Nil => Ok(None),
                Value::BulkString(v) => Ok(Some(v)),
                other => Err(Error::Storage(format!("HGET answered {}", describe(&other)))),
            };
        }
        // The first member at or after the key is the key's, if the key is there (no key is a
        // prefix of another).
        let answer = self.db.cluster.call(self.slot, self.range_cmd(key, true, None, 1), true)?;
        Ok(self.page(answer, 1)?.0.into_iter().next().filter(|(k, _)| k == key).map(|(_, v)| v))
    }

    fn for_range(&self, from: &[u8], to: Option<&[u8]>, f: Visitor<'_>) -> Result<()> {
        if to.is_some_and(|to| to <= from) {
            return Ok(());
        }
        let (mut cursor, mut inclusive, mut page) = (from.to_vec(), true, FIRST_PAGE);
        loop {
            let answer = self.db.cluster.call(self.slot, self.range_cmd(&cursor, inclusive, to, page), true)?;
            let (got, next) = self.page(answer, page)?;
            for (k, v) in &got {
                if !f(k, v)? {
                    return Ok(());
                }
            }
            match next {
                Some(next) => (cursor, inclusive) = (next, false),
                None => return Ok(()),
            }
            page = (page * 2).min(MAX_PAGE);
        }
    }
}

/// Every bucket's stream of one kind (cells or notify), merged into key order.
struct Merged<'a>(Vec<Zset<'a>>);

/// One bucket's buffered page in a merge.
struct Stream {
    buffer: std::vec::IntoIter<(Vec<u8>, Vec<u8>)>,
    /// Where the next page starts (exclusive), when more may follow.
    more_after: Option<Vec<u8>>,
    page: usize,
    /// The value of this stream's key in the heap.
    current: Option<Vec<u8>>,
}

impl Stream {
    fn new((got, more_after): Page, page: usize) -> Stream {
        Stream { buffer: got.into_iter(), more_after, page, current: None }
    }
}

impl Merged<'_> {
    /// Queues stream `i`'s next entry, reading its next page when the buffer is empty.
    fn advance(
        &self,
        i: usize,
        s: &mut Stream,
        to: Option<&[u8]>,
        heap: &mut BinaryHeap<Reverse<(Vec<u8>, usize)>>,
    ) -> Result<()> {
        if s.buffer.len() == 0
            && let Some(after) = s.more_after.take()
        {
            let page = (s.page * 2).min(MAX_PAGE);
            let z = &self.0[i];
            let answer = z.db.cluster.call(z.slot, z.range_cmd(&after, false, to, page), true)?;
            *s = Stream::new(z.page(answer, page)?, page);
        }
        if let Some((k, v)) = s.buffer.next() {
            s.current = Some(v);
            heap.push(Reverse((k, i)));
        }
        Ok(())
    }
}

impl KvRead for Merged<'_> {
    fn get(&self, _key: &[u8]) -> Result<Option<Vec<u8>>> {
        // A merged view is for scans: a point read knows its bucket.
        Err(Error::Storage("point read on a merged Redis view".into()))
    }

    fn for_range(&self, from: &[u8], to: Option<&[u8]>, f: Visitor<'_>) -> Result<()> {
        if to.is_some_and(|to| to <= from) || self.0.is_empty() {
            return Ok(());
        }
        let db = self.0[0].db;
        // The first page of every bucket in one round (one pipeline per master).
        let cmds = self.0.iter().map(|z| (z.slot, z.range_cmd(from, true, to, FIRST_PAGE))).collect();
        let mut streams: Vec<Stream> = db
            .cluster
            .batch(cmds, true, None)?
            .into_iter()
            .zip(&self.0)
            .map(|(v, z)| Ok(Stream::new(z.page(v, FIRST_PAGE)?, FIRST_PAGE)))
            .collect::<Result<_>>()?;
        // The smallest unread key of each bucket; its value waits in `current`.
        let mut heap: BinaryHeap<Reverse<(Vec<u8>, usize)>> = BinaryHeap::new();
        for (i, s) in streams.iter_mut().enumerate() {
            self.advance(i, s, to, &mut heap)?;
        }
        while let Some(Reverse((k, i))) = heap.pop() {
            let v = streams[i].current.take().expect("a value per queued key");
            if !f(&k, &v)? {
                return Ok(());
            }
            self.advance(i, &mut streams[i], to, &mut heap)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use percolator_store::backends::keys::{cell_prefix, version_key};

    #[test]
    fn packed_members_split_at_the_end_of_their_key() {
        // Zero bytes inside the components (escaped) must not end a component.
        let cell = cell_prefix("t\0x", b"r\0\0w", "c:\0");
        let key = version_key(&cell, Kind::Write, Timestamp::from_raw(7));
        for value in [&b""[..], b"\0\x01\0\x01", b"value"] {
            let member = [key.as_slice(), value].concat();
            assert_eq!(key_len(&member, 3, 9), Some(key.len()), "{value:?}");
            assert_eq!(key_len(&[cell.as_slice(), value].concat(), 3, 0), Some(cell.len()));
        }
        // Not a key: a component that never ends, a bad escape, too short a tail.
        assert_eq!(key_len(b"abc", 3, 0), None);
        assert_eq!(key_len(b"a\0\x07b\0\x01c\0\x01", 3, 0), None);
        assert_eq!(key_len(&cell, 3, 9), None);
    }
}
