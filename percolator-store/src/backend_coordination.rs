//! The coordination of a store alone: the timestamp oracle in this process, over the backend's
//! high-water mark, and the worker leases as rows of the backend's metadata
//! ([`BackendCoordination`]).
//!
//! The oracle hands out timestamps from an in-memory range and persists only the range's upper
//! end (the high-water mark) before handing out anything below it. After a crash it resumes at
//! the persisted mark, so no timestamp is ever issued twice, at the cost of skipping the unused
//! rest of the range. Allocation is one atomic add; callers that run past the range wait for one
//! shared persist (the paper's batching: one pending request serves many transactions).
//!
//! A lease is the row `worker/<id>` of the backend's metadata holding its expiry in wall-clock
//! milliseconds. On an exclusive backend (one process owns the file) every lease found at open
//! belongs to an earlier, dead incarnation and is removed.
//!
//! That is right only while one process uses the store. Hosts that share a backend use a shared
//! coordination instead (the oracle service and etcd leases of `percolator-redis`): one elected
//! leader hands out every timestamp.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::bigtable::{Bigtable, Op};
use crate::clock::now_ms;
use crate::coordination::{Coordination, Published, Renewed, decode_lease, encode_lease};
use crate::error::{Error, Result};
use crate::timestamp::Timestamp;

/// Metadata key of the persisted high-water mark.
pub(crate) const HWM_KEY: &str = "oracle/high_water_mark";

/// Timestamps reserved per persist.
const DEFAULT_RANGE: u64 = 1 << 20;

/// Metadata keys of the worker leases.
const LEASE_PREFIX: &str = "worker/";

fn lease_key(worker: u64) -> String {
    format!("{LEASE_PREFIX}{worker:020}")
}

/// The coordination of a store alone: the oracle in this process over `backend`'s high-water
/// mark, the worker leases in its metadata. Two stores must never use it on one backend at the
/// same time ([`Store::with_backend`](crate::Store::with_backend) makes sure of it).
pub struct BackendCoordination {
    local: Local,
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

impl BackendCoordination {
    /// Opens the in-process oracle over `backend`, resuming above its persisted high-water mark.
    pub fn open(backend: Arc<dyn Bigtable>) -> Result<BackendCoordination> {
        Self::with_range(backend, DEFAULT_RANGE)
    }

    /// Like [`BackendCoordination::open`] with a custom reservation size (small ranges exercise
    /// the persist path).
    pub fn with_range(backend: Arc<dyn Bigtable>, range: u64) -> Result<BackendCoordination> {
        let hwm = stored_mark(backend.as_ref())?;
        let persisted_in = AtomicU64::new(backend.reopens());
        Ok(BackendCoordination {
            local: Local {
                persisted_in,
                backend,
                next: AtomicU64::new(hwm.max(1)),
                limit: AtomicU64::new(hwm.max(1)),
                persist: Mutex::new(0),
                range: range.max(1),
            },
        })
    }

    fn backend(&self) -> &dyn Bigtable {
        self.local.backend.as_ref()
    }
}

impl Coordination for BackendCoordination {
    fn next_timestamp(&self) -> Result<Timestamp> {
        self.local.next()
    }

    fn persists(&self) -> u64 {
        self.local.persist.lock().map(|g| *g).unwrap_or(0)
    }

    fn shared(&self) -> Option<String> {
        None
    }

    fn write_lease(&self, worker: u64, period: Duration, published: Published) -> Result<Option<Renewed>> {
        let sent = now_ms();
        let expiry = sent + period.as_millis() as u64;
        let value = encode_lease(expiry, published);
        self.backend().apply(vec![Op::MetaPut { key: lease_key(worker), value }])?;
        Ok(Some(Renewed { sent, expiry }))
    }

    fn live_leases(&self) -> Result<Vec<(u64, Published)>> {
        let now = now_ms();
        let mut out = Vec::new();
        for (key, value) in self.backend().meta_scan(LEASE_PREFIX)? {
            let Some(Ok(id)) = key.strip_prefix(LEASE_PREFIX).map(str::parse::<u64>) else { continue };
            if let Some((expiry, published)) = decode_lease(&value)
                && expiry > now
            {
                out.push((id, published));
            }
        }
        Ok(out)
    }

    fn lease_alive(&self, worker: u64) -> Result<bool> {
        let value = self.backend().meta_get(&lease_key(worker))?;
        Ok(value.and_then(|v| decode_lease(&v)).is_some_and(|(expiry, _)| expiry > now_ms()))
    }

    fn revoke_lease(&self, worker: u64) -> Result<()> {
        self.backend().apply(vec![Op::MetaDelete { key: lease_key(worker) }])?;
        Ok(())
    }

    fn clear_dead_leases(&self) -> Result<()> {
        let backend = self.backend();
        let ops: Vec<Op> =
            backend.meta_scan(LEASE_PREFIX)?.into_iter().map(|(key, _)| Op::MetaDelete { key }).collect();
        backend.apply(ops)?;
        Ok(())
    }
}

/// On a shared (non-exclusive) backend, waits until no other worker holds a live lease in the
/// backend's metadata, up to one lease period (a worker that crashed a moment ago still holds
/// one), removing expired leases; fails if another worker is still alive then.
///
/// A store with a [`BackendCoordination`] runs its oracle over the backend's high-water mark
/// and hands out timestamps from a reserved range: two such stores at once would hand out
/// overlapping, unordered timestamps and break snapshot isolation. So one of them at a time
/// uses a shared backend; hosts that share it use a shared coordination (their leases live
/// there, not in the backend).
pub(crate) fn wait_until_sole_worker(backend: &dyn Bigtable, lease: Duration) -> Result<()> {
    let deadline = now_ms() + lease.as_millis() as u64 + 1000;
    loop {
        let now = now_ms();
        let mut live = Vec::new();
        let mut expired = Vec::new();
        for (key, value) in backend.meta_scan(LEASE_PREFIX)? {
            match decode_lease(&value) {
                Some((expiry, _)) if expiry > now => live.push(key),
                _ => expired.push(Op::MetaDelete { key }),
            }
        }
        backend.apply(expired)?;
        let Some(other) = live.first() else { return Ok(()) };
        if now >= deadline {
            return Err(Error::Unavailable(format!(
                "another store (worker {}) with a timestamp oracle of its own is using this shared backend; \
                 one such store at a time may use it (hosts that share a backend use the oracle service)",
                other.trim_start_matches(LEASE_PREFIX).trim_start_matches('0')
            )));
        }
        tracing::info!(worker = %other, "waiting for another worker's lease on the shared backend to expire");
        std::thread::sleep(Duration::from_millis(200));
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
    use crate::oracle::Oracle;

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
