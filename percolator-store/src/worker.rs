//! Worker liveness tokens: the Chubby-lease analog.
//!
//! Each open [`Store`](crate::Store) is a worker with a unique id (a timestamp from the oracle)
//! and a lease row `worker/<id>` in the metadata keyspace holding its expiry in wall-clock
//! milliseconds, refreshed by a heartbeat thread at a third of the lease period. A lock whose
//! worker's lease has expired belongs to a dead worker and may be cleaned up at once. On an
//! exclusive backend (one process owns the file) every lease found at open belongs to an earlier,
//! dead incarnation and is removed.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::bigtable::{Bigtable, Op};
use crate::error::{Error, Result};
use crate::store::Inner;
use crate::timestamp::Timestamp;

pub(crate) const LEASE_PREFIX: &str = "worker/";

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

pub(crate) fn lease_key(worker: u64) -> String {
    format!("{LEASE_PREFIX}{worker:020}")
}

/// What a worker publishes in its lease.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Published {
    /// A timestamp at or below the start of every transaction of the worker that runs now or
    /// starts later (GC's share of the safepoint on a shared backend; see [`shared_safepoint`]).
    pub(crate) oldest: Timestamp,
    /// The registry version whose notify cells every commit of the worker sets from now on
    /// (see `registry::acknowledge`).
    pub(crate) acked_registry: u64,
    /// Whether the worker runs a scanner (it takes a share of the notify partitions).
    pub(crate) scanning: bool,
}

/// Writes `worker`'s lease: its expiry (now + `lease`) and what it publishes.
pub(crate) fn write_lease(backend: &dyn Bigtable, worker: u64, lease: Duration, published: Published) -> Result<()> {
    let expiry = now_ms() + lease.as_millis() as u64;
    let mut value = expiry.to_le_bytes().to_vec();
    value.extend_from_slice(&published.oldest.raw().to_le_bytes());
    value.extend_from_slice(&published.acked_registry.to_le_bytes());
    value.push(u8::from(published.scanning));
    backend.apply(vec![Op::MetaPut { key: lease_key(worker), value }])?;
    Ok(())
}

/// Writes this store's lease now, with what it publishes now.
pub(crate) fn publish(inner: &Inner) -> Result<()> {
    let published = Published {
        oldest: inner.oldest_start()?,
        acked_registry: inner.acked_registry.load(Ordering::SeqCst),
        scanning: inner.scanners.load(Ordering::SeqCst) > 0,
    };
    write_lease(inner.backend.as_ref(), inner.worker, inner.config.worker_lease, published)
}

/// A lease value's expiry and what it publishes. Older leases lack fields: a lease without an
/// oldest start publishes zero (nothing may be collected while it lives), one without a
/// registry version has acknowledged none, one without a scanner flag runs no scanner.
fn decode_lease(value: &[u8]) -> Option<(u64, Published)> {
    let u64_at = |at: usize| value.get(at..at + 8).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
    let expiry = u64_at(0)?;
    Some((
        expiry,
        Published {
            oldest: Timestamp::from_raw(u64_at(8).unwrap_or(0)),
            acked_registry: u64_at(16).unwrap_or(0),
            scanning: value.get(24).is_some_and(|b| *b == 1),
        },
    ))
}

/// The live leases: worker id and what each publishes.
pub(crate) fn live_workers(backend: &dyn Bigtable) -> Result<Vec<(u64, Published)>> {
    let now = now_ms();
    let mut out = Vec::new();
    for (key, value) in backend.meta_scan(LEASE_PREFIX)? {
        let Ok(id) = key[LEASE_PREFIX.len()..].parse::<u64>() else { continue };
        if let Some((expiry, published)) = decode_lease(&value)
            && expiry > now
        {
            out.push((id, published));
        }
    }
    Ok(out)
}

/// Other live workers that have not acknowledged registry `version`.
pub(crate) fn behind_registry(backend: &dyn Bigtable, me: u64, version: Timestamp) -> Result<Vec<u64>> {
    Ok(live_workers(backend)?
        .into_iter()
        .filter(|(id, p)| *id != me && p.acked_registry < version.raw())
        .map(|(id, _)| id)
        .collect())
}

/// The oldest start timestamp any other live worker of a shared backend has published: GC may
/// not remove what a transaction of theirs can read. Each worker publishes, under the lock that
/// registers its transactions, the oldest start of its running transactions or else a fresh
/// timestamp, so its later transactions all start above what it published; a stale lease only
/// publishes less. A worker that opens after this scan starts its transactions above the
/// caller's own fresh timestamp (taken before).
pub(crate) fn shared_safepoint(backend: &dyn Bigtable, me: u64) -> Result<Option<Timestamp>> {
    Ok(live_workers(backend)?.into_iter().filter(|(id, _)| *id != me).map(|(_, p)| p.oldest).min())
}

/// Removes every lease: on an exclusive backend their owners are dead.
pub(crate) fn clear_stale_leases(backend: &dyn Bigtable) -> Result<()> {
    let ops: Vec<Op> = backend.meta_scan(LEASE_PREFIX)?.into_iter().map(|(key, _)| Op::MetaDelete { key }).collect();
    backend.apply(ops)?;
    Ok(())
}

/// On a shared (non-exclusive) backend, waits until no other worker holds a live lease, up to
/// one lease period (a worker that crashed a moment ago still holds one), removing expired
/// leases; fails if another worker is still alive then.
///
/// Until the timestamp oracle is a service of its own (docs/design.md, "Oracle"), each store
/// runs its oracle over the backend's high-water mark and hands out timestamps from a reserved
/// range: two stores at once would hand out overlapping, unordered timestamps and break
/// snapshot isolation. So one store at a time uses a shared backend.
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
                "another store (worker {}) is using this shared backend; one store at a time may use it \
                 until the timestamp oracle runs as a service",
                other.trim_start_matches(LEASE_PREFIX).trim_start_matches('0')
            )));
        }
        tracing::info!(worker = %other, "waiting for another worker's lease on the shared backend to expire");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// True if `worker`'s lease is unexpired.
pub(crate) fn lease_alive(backend: &dyn Bigtable, worker: u64) -> Result<bool> {
    Ok(backend
        .meta_get(&lease_key(worker))?
        .and_then(|v| decode_lease(&v))
        .is_some_and(|(expiry, _)| expiry > now_ms()))
}

/// Stops the heartbeat thread when the store is dropped.
#[derive(Default)]
pub(crate) struct Stop {
    stopped: Mutex<bool>,
    cv: Condvar,
}

impl Stop {
    pub(crate) fn stop(&self) {
        if let Ok(mut s) = self.stopped.lock() {
            *s = true;
        }
        self.cv.notify_all();
    }

    /// Sleeps up to `d`; returns true if stopped.
    pub(crate) fn sleep(&self, d: Duration) -> bool {
        let Ok(g) = self.stopped.lock() else { return true };
        match self.cv.wait_timeout_while(g, d, |s| !*s) {
            Ok((g, _)) => *g,
            Err(_) => true,
        }
    }
}

/// Spawns the lease heartbeat. It holds only a weak reference, so it never keeps a store alive.
pub(crate) fn spawn_heartbeat(inner: Weak<Inner>, stop: Arc<Stop>, lease: Duration) {
    std::thread::Builder::new()
        .name("percolator-lease".into())
        .spawn(move || {
            while !stop.sleep(lease / 3) {
                let Some(inner) = inner.upgrade() else { return };
                // A failed refresh is retried at the next beat; the lease has two beats of slack.
                let _ = publish(&inner);
            }
        })
        .expect("spawning the lease heartbeat thread");
}
