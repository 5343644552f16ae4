//! The timestamp oracle: strictly increasing timestamps that survive crashes.
//!
//! The oracle hands out timestamps from an in-memory range and persists only the range's upper
//! end (the high-water mark) before handing out anything below it. After a crash it resumes at
//! the persisted mark, so no timestamp is ever issued twice, at the cost of skipping the unused
//! rest of the range. Allocation is one atomic add; callers that run past the range wait for one
//! shared persist (the paper's batching: one pending request serves many transactions).
//!
//! That in-process oracle is right only while one process uses the store. Hosts that share a
//! backend use the oracle service instead (`oracle_service.rs`): one elected leader hands out
//! every timestamp.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::bigtable::{Bigtable, Op};
use crate::clock::Clock;
use crate::error::{Error, Result};
use crate::oracle_service::{OracleServer, OracleServiceConfig, RemoteOracle};
use crate::timestamp::Timestamp;

/// Metadata key of the persisted high-water mark.
pub(crate) const HWM_KEY: &str = "oracle/high_water_mark";

/// Timestamps reserved per persist.
const DEFAULT_RANGE: u64 = 1 << 20;

/// The timestamp oracle: strictly increasing timestamps. Over an exclusive backend it runs in
/// this process ([`Oracle::open`]); hosts sharing a backend ask one oracle service
/// ([`Oracle::remote`], see [`OracleServer`](crate::OracleServer)). All clones of a
/// [`Store`](crate::Store) use one.
pub struct Oracle {
    kind: Kind,
    /// Timestamps handed out by this process (the oracle's rate, in `Metrics`).
    issued: AtomicU64,
    /// When they were handed out, sampled (freshness; see `clock.rs`).
    clock: Clock,
}

enum Kind {
    Local(Local),
    /// The client, and this process's own candidate if it runs one (dropped after the client).
    Remote(RemoteOracle, Option<OracleServer>),
}

/// The in-process oracle over a backend's high-water mark.
struct Local {
    backend: Arc<dyn Bigtable>,
    /// The next timestamp to hand out (may run past `limit`; those callers wait for a persist).
    next: AtomicU64,
    /// Every timestamp below this is covered by the persisted high-water mark.
    limit: AtomicU64,
    /// Serializes persists; holds the number of persists done.
    persist: Mutex<u64>,
    range: u64,
    /// The backend's reopen count ([`Bigtable::reopens`]) when `limit` was persisted. A reopen
    /// goes back to the last durable commit, which at durability none may predate that
    /// persist: the oracle persists its mark again before it hands out another timestamp.
    persisted_in: AtomicU64,
}

impl Oracle {
    /// Opens the in-process oracle over `backend`, resuming above its persisted high-water mark.
    pub fn open(backend: Arc<dyn Bigtable>) -> Result<Oracle> {
        Self::with_range(backend, DEFAULT_RANGE)
    }

    /// Like [`Oracle::open`] with a custom reservation size (small ranges exercise the persist path).
    pub fn with_range(backend: Arc<dyn Bigtable>, range: u64) -> Result<Oracle> {
        let hwm = stored_mark(backend.as_ref())?;
        let persisted_in = AtomicU64::new(backend.reopens());
        Ok(Oracle::of(Kind::Local(Local {
            persisted_in,
            backend,
            next: AtomicU64::new(hwm.max(1)),
            limit: AtomicU64::new(hwm.max(1)),
            persist: Mutex::new(0),
            range: range.max(1),
        })))
    }

    fn of(kind: Kind) -> Oracle {
        Oracle { kind, issued: AtomicU64::new(0), clock: Clock::default() }
    }

    /// A client of the oracle service of `namespace`, found through etcd at `etcd`
    /// (`http://host:port`): the oracle of hosts that share a backend. Each call of
    /// [`Oracle::next`] waits for one request to the service; concurrent calls share one.
    pub fn remote(etcd: &[String], namespace: &str) -> Result<Oracle> {
        Ok(Oracle::of(Kind::Remote(RemoteOracle::connect(etcd, namespace)?, None)))
    }

    /// Like [`Oracle::remote`], with this process also standing as a candidate for leader (what a
    /// host does, so that the service lives as long as any host does). The candidate stops,
    /// handing leadership over, when the oracle is dropped.
    pub fn remote_with_candidate(config: OracleServiceConfig) -> Result<Oracle> {
        let client = RemoteOracle::connect(&config.etcd, &config.namespace)?;
        let server = OracleServer::start(config)?;
        Ok(Oracle::of(Kind::Remote(client, Some(server))))
    }

    /// This process's candidate, if it runs one.
    pub fn candidate(&self) -> Option<&OracleServer> {
        match &self.kind {
            Kind::Remote(_, server) => server.as_ref(),
            Kind::Local(_) => None,
        }
    }

    /// The etcd endpoints and namespace of a shared oracle's service (where the hosts' worker
    /// leases live too), or `None` for an in-process oracle.
    pub(crate) fn service(&self) -> Option<(Vec<String>, String)> {
        match &self.kind {
            Kind::Remote(client, _) => Some(client.service()),
            Kind::Local(_) => None,
        }
    }

    /// Whether this oracle is a service shared by every host (not one process's own).
    pub fn is_shared(&self) -> bool {
        matches!(self.kind, Kind::Remote(..))
    }

    /// Returns a timestamp greater than every timestamp this oracle (or any earlier incarnation
    /// on the same store, or, for a shared oracle, any host) has returned before this call.
    pub fn next(&self) -> Result<Timestamp> {
        let ts = match &self.kind {
            Kind::Local(l) => l.next(),
            Kind::Remote(r, _) => r.next(),
        }?;
        self.issued.fetch_add(1, Ordering::Relaxed);
        self.clock.issued(ts);
        Ok(ts)
    }

    /// Timestamps this oracle handed out in this process.
    pub fn issued(&self) -> u64 {
        self.issued.load(Ordering::Relaxed)
    }

    pub(crate) fn clock(&self) -> &Clock {
        &self.clock
    }

    /// How many high-water-mark persists this process's oracle has done (0 for a shared one).
    pub fn persists(&self) -> u64 {
        match &self.kind {
            Kind::Local(l) => l.persist.lock().map(|g| *g).unwrap_or(0),
            Kind::Remote(..) => 0,
        }
    }
}

/// The persisted high-water mark (1 if none is).
fn stored_mark(backend: &dyn Bigtable) -> Result<u64> {
    Ok(match backend.meta_get(HWM_KEY)? {
        Some(v) => u64::from_le_bytes(
            v.as_slice().try_into().map_err(|_| Error::Corrupt("oracle high-water mark is not 8 bytes".into()))?,
        ),
        None => 1,
    })
}

impl Local {
    fn stored_mark(&self) -> Result<u64> {
        stored_mark(self.backend.as_ref())
    }

    fn next(&self) -> Result<Timestamp> {
        let v = self.next.fetch_add(1, Ordering::SeqCst);
        if v < self.limit.load(Ordering::SeqCst) && self.persisted() {
            return Ok(Timestamp::from_raw(v));
        }
        self.extend_past(v)?;
        Ok(Timestamp::from_raw(v))
    }

    /// Whether `limit` was persisted since the backend's last reopen.
    fn persisted(&self) -> bool {
        self.backend.reopens() == self.persisted_in.load(Ordering::SeqCst)
    }

    /// Persists a high-water mark above `v`, unless another caller already did.
    fn extend_past(&self, v: u64) -> Result<()> {
        let mut persists = self.persist.lock().map_err(|_| Error::Closed)?;
        if v < self.limit.load(Ordering::SeqCst) && self.persisted() {
            return Ok(());
        }
        // Read before the persist: a reopen during it makes the next caller persist again.
        let reopens = self.backend.reopens();
        if v < self.limit.load(Ordering::SeqCst) && self.stored_mark()? >= self.limit.load(Ordering::SeqCst) {
            // Reopened, and the mark is still there (the persist was durable): no write, so
            // timestamps (and reads) go on while the store refuses writes.
            self.persisted_in.store(reopens, Ordering::SeqCst);
            return Ok(());
        }
        // Cover everyone who already ran past the limit, plus a fresh range (also after a
        // reopen: the counter never goes back, so the new mark is above all it handed out).
        let new_limit = self.next.load(Ordering::SeqCst).max(v + 1) + self.range;
        self.backend.apply(vec![Op::MetaPut { key: HWM_KEY.into(), value: new_limit.to_le_bytes().to_vec() }])?;
        self.limit.store(new_limit, Ordering::SeqCst);
        self.persisted_in.store(reopens, Ordering::SeqCst);
        *persists += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bigtable::WriteRecord;
    use crate::bigtable::{BackendStats, CellRead, CellRef, NotifyEntry, Outcome, RowVersions, ScanRange, ScannedCell};
    use crate::mem_backend::MemBigtable;

    /// A backend that can be "reopened" (its reopen count moves on), as redb's after a full disk.
    struct Reopening {
        mem: MemBigtable,
        reopens: AtomicU64,
    }

    impl Bigtable for Reopening {
        fn apply(&self, ops: Vec<Op>) -> Result<Vec<Outcome>> {
            self.mem.apply(ops)
        }
        fn read_row(&self, table: &str, row: &[u8], columns: &[&str], ts: Timestamp) -> Result<Vec<CellRead>> {
            self.mem.read_row(table, row, columns, ts)
        }
        fn find_write(&self, cell: &CellRef, start_ts: Timestamp) -> Result<Option<(Timestamp, WriteRecord)>> {
            self.mem.find_write(cell, start_ts)
        }
        fn read_data(&self, cell: &CellRef, start_ts: Timestamp) -> Result<Option<Vec<u8>>> {
            self.mem.read_data(cell, start_ts)
        }
        fn scan(&self, range: &ScanRange<'_>) -> Result<Vec<ScannedCell>> {
            self.mem.scan(range)
        }
        fn scan_versions(&self, from: Option<(&str, &[u8])>, limit: usize) -> Result<Vec<RowVersions>> {
            self.mem.scan_versions(from, limit)
        }
        fn scan_notify(&self, from: Option<&[u8]>, limit: usize) -> Result<Vec<NotifyEntry>> {
            self.mem.scan_notify(from, limit)
        }
        fn meta_get(&self, key: &str) -> Result<Option<Vec<u8>>> {
            self.mem.meta_get(key)
        }
        fn meta_scan(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>> {
            self.mem.meta_scan(prefix)
        }
        fn exclusive(&self) -> bool {
            true
        }
        fn stats(&self) -> BackendStats {
            self.mem.stats()
        }
        fn reopens(&self) -> u64 {
            self.reopens.load(Ordering::SeqCst)
        }
    }

    #[test]
    fn a_reopen_that_lost_the_mark_persists_it_again_before_handing_out_more() {
        let backend = Arc::new(Reopening { mem: MemBigtable::new(), reopens: AtomicU64::new(0) });
        let oracle = Oracle::with_range(backend.clone(), 100).unwrap();
        let mut last = Timestamp::ZERO;
        for _ in 0..50 {
            last = oracle.next().unwrap();
        }
        let persists = oracle.persists();
        // Reopened with the mark intact (durability fsync): no write, timestamps go on.
        backend.reopens.fetch_add(1, Ordering::SeqCst);
        let t = oracle.next().unwrap();
        assert!(t > last);
        assert_eq!(oracle.persists(), persists, "a mark that survived the reopen is not written again");
        // Reopened at an older state that lacks the mark's last persist (durability none).
        backend.apply(vec![Op::MetaPut { key: HWM_KEY.into(), value: 1u64.to_le_bytes().to_vec() }]).unwrap();
        backend.reopens.fetch_add(1, Ordering::SeqCst);
        let t = oracle.next().unwrap();
        assert!(t > last);
        assert_eq!(oracle.persists(), persists + 1, "the lost mark is persisted again");
        // A crash now resumes above everything handed out.
        let restarted = Oracle::with_range(backend, 100).unwrap();
        assert!(restarted.next().unwrap() > t, "a timestamp would be handed out twice after a crash");
    }

    #[test]
    fn strictly_increasing_across_threads_and_reopen() {
        let backend: Arc<dyn Bigtable> = Arc::new(MemBigtable::new());
        let oracle = Arc::new(Oracle::with_range(backend.clone(), 100).unwrap());
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let o = oracle.clone();
                std::thread::spawn(move || {
                    let mut last = Timestamp::ZERO;
                    let mut all = Vec::new();
                    for _ in 0..10_000 {
                        let t = o.next().unwrap();
                        assert!(t > last, "per-caller order must be strictly increasing");
                        last = t;
                        all.push(t);
                    }
                    all
                })
            })
            .collect();
        let mut all: Vec<Timestamp> = handles.into_iter().flat_map(|h| h.join().unwrap()).collect();
        let max = *all.iter().max().unwrap();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 40_000, "no timestamp issued twice");
        assert!(oracle.persists() >= 200, "a range of 100 means a persist every ~100 timestamps");
        // A new incarnation (after a crash) resumes above everything issued.
        let reopened = Oracle::with_range(backend, 100).unwrap();
        assert!(reopened.next().unwrap() > max);
    }
}
