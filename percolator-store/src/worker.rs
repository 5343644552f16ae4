//! Worker liveness tokens: the Chubby-lease analog.
//!
//! Each open [`Store`](crate::Store) is a worker with a unique id (a timestamp from the oracle)
//! and a lease, refreshed by a heartbeat thread at a third of the lease period, that carries
//! what the worker publishes ([`Published`]). A lock whose worker's lease has expired belongs
//! to a dead worker and may be cleaned up at once. Where the lease lives ([`Liveness`]):
//! - with the shared oracle service, in **etcd**: the key `<ns>/workers/<id>` attached to an
//!   etcd lease of the worker, which etcd expires on its own clock;
//! - otherwise in the backend's metadata, the row `worker/<id>` holding its expiry in
//!   wall-clock milliseconds. On an exclusive backend (one process owns the file) every lease
//!   found at open belongs to an earlier, dead incarnation and is removed.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::bigtable::{Bigtable, Op};
use crate::error::{Error, Result};
use crate::etcd::Etcd;
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

/// Where the worker leases live. See the module docs.
pub(crate) enum Liveness {
    /// Rows `worker/<id>` of the backend's metadata, with a wall-clock expiry.
    Backend,
    /// etcd keys `<prefix><id>`, each attached to its worker's etcd lease.
    Etcd {
        etcd: Etcd,
        prefix: String,
        /// This worker's etcd lease (replaced if it ever expires).
        lease: AtomicI64,
    },
}

/// A lease value: expiry in wall-clock milliseconds, then what the worker publishes.
fn encode_lease(expiry: u64, published: Published) -> Vec<u8> {
    let mut value = expiry.to_le_bytes().to_vec();
    value.extend_from_slice(&published.oldest.raw().to_le_bytes());
    value.extend_from_slice(&published.acked_registry.to_le_bytes());
    value.push(u8::from(published.scanning));
    value
}

impl Liveness {
    /// Leases in the etcd cluster at `endpoints`, under `<namespace>/workers/`.
    pub(crate) fn etcd(endpoints: &[String], namespace: &str) -> Result<Liveness> {
        Ok(Liveness::Etcd {
            etcd: Etcd::new(endpoints, Duration::from_secs(2))?,
            prefix: format!("{namespace}/workers/"),
            lease: AtomicI64::new(0),
        })
    }

    /// Writes `worker`'s lease (taking an etcd lease first if it has none): expiring `period`
    /// from now, with what it publishes. Returns the lease's new expiry and when the request
    /// that set it was sent (wall-clock ms), if this write (re)started the lease's period.
    pub(crate) fn write(
        &self,
        backend: &dyn Bigtable,
        worker: u64,
        period: Duration,
        published: Published,
    ) -> Result<Option<Renewed>> {
        let sent = now_ms();
        match self {
            Liveness::Backend => {
                let expiry = sent + period.as_millis() as u64;
                let value = encode_lease(expiry, published);
                backend.apply(vec![Op::MetaPut { key: lease_key(worker), value }])?;
                Ok(Some(Renewed { sent, expiry }))
            }
            Liveness::Etcd { etcd, prefix, lease } => {
                let mut id = lease.load(Ordering::SeqCst);
                let granted = id == 0;
                if granted {
                    id = etcd.grant(period)?;
                    lease.store(id, Ordering::SeqCst);
                }
                // etcd expires the key: the value's own expiry never does.
                etcd.put(&format!("{prefix}{worker:020}"), &encode_lease(u64::MAX, published), id)?;
                // etcd's TTL is whole seconds (rounded down, as `grant` asks).
                let expiry = sent + period.as_secs().max(1) * 1000;
                Ok(granted.then_some(Renewed { sent, expiry }))
            }
        }
    }

    /// Renews the lease (the heartbeat). An etcd lease found expired (the worker stalled for a
    /// whole period) is replaced: other workers treated this one as dead meanwhile, and may
    /// have rolled back its locks, so its transactions in flight will fail to commit.
    fn renew(&self, inner: &Inner) -> Result<()> {
        if let Liveness::Etcd { etcd, lease, .. } = self {
            let id = lease.load(Ordering::SeqCst);
            let sent = now_ms();
            if id != 0 {
                match etcd.keepalive(id)? {
                    Some(ttl) => inner.lease_renewed(Renewed { sent, expiry: sent + ttl.as_millis() as u64 }),
                    None => {
                        tracing::error!(
                            worker = inner.worker,
                            "the worker's etcd lease expired (the process stalled for a lease period); taking a new one"
                        );
                        lease.store(0, Ordering::SeqCst);
                    }
                }
            }
        }
        publish(inner)
    }

    /// The live leases: worker id and what each publishes.
    pub(crate) fn live(&self, backend: &dyn Bigtable) -> Result<Vec<(u64, Published)>> {
        let (prefix, entries) = match self {
            Liveness::Backend => (LEASE_PREFIX, backend.meta_scan(LEASE_PREFIX)?),
            Liveness::Etcd { etcd, prefix, .. } => (prefix.as_str(), etcd.range_prefix(prefix)?),
        };
        let now = now_ms();
        let mut out = Vec::new();
        for (key, value) in entries {
            let Some(Ok(id)) = key.strip_prefix(prefix).map(str::parse::<u64>) else { continue };
            if let Some((expiry, published)) = decode_lease(&value)
                && expiry > now
            {
                out.push((id, published));
            }
        }
        Ok(out)
    }

    /// True if `worker`'s lease is unexpired.
    pub(crate) fn alive(&self, backend: &dyn Bigtable, worker: u64) -> Result<bool> {
        let value = match self {
            Liveness::Backend => backend.meta_get(&lease_key(worker))?,
            Liveness::Etcd { etcd, prefix, .. } => etcd.get(&format!("{prefix}{worker:020}"))?.map(|kv| kv.value),
        };
        Ok(value.and_then(|v| decode_lease(&v)).is_some_and(|(expiry, _)| expiry > now_ms()))
    }

    /// Ends `worker`'s lease (a clean close), so its locks are resolvable at once.
    pub(crate) fn remove(&self, backend: &dyn Bigtable, worker: u64) -> Result<()> {
        match self {
            Liveness::Backend => {
                backend.apply(vec![Op::MetaDelete { key: lease_key(worker) }])?;
            }
            Liveness::Etcd { etcd, lease, .. } => match lease.swap(0, Ordering::SeqCst) {
                0 => {}
                id => etcd.revoke(id)?,
            },
        }
        Ok(())
    }
}

/// A lease (re)started: when the request was sent and the expiry it set (wall-clock ms).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Renewed {
    pub(crate) sent: u64,
    pub(crate) expiry: u64,
}

/// Writes this store's lease now, with what it publishes now.
pub(crate) fn publish(inner: &Inner) -> Result<()> {
    let published = Published {
        oldest: inner.oldest_start()?,
        acked_registry: inner.acked_registry.load(Ordering::SeqCst),
        scanning: inner.scanners.load(Ordering::SeqCst) > 0,
    };
    if let Some(renewed) =
        inner.liveness.write(inner.backend.as_ref(), inner.worker, inner.config.worker_lease, published)?
    {
        inner.lease_renewed(renewed);
    }
    Ok(())
}

/// Reads of a transaction on a shared backend are trusted only while the worker's lease is
/// surely alive in every other worker's eyes: until its expiry less this margin (clock rates).
pub(crate) fn lease_margin(period: Duration) -> u64 {
    (period.as_millis() as u64 / 10).max(500)
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

/// Other live workers that have not acknowledged registry `version`.
pub(crate) fn behind_registry(inner: &Inner, version: Timestamp) -> Result<Vec<u64>> {
    let me = inner.worker;
    Ok(inner
        .liveness
        .live(inner.backend.as_ref())?
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
pub(crate) fn shared_safepoint(inner: &Inner) -> Result<Option<Timestamp>> {
    let live = inner.liveness.live(inner.backend.as_ref())?;
    Ok(live.into_iter().filter(|(id, _)| *id != inner.worker).map(|(_, p)| p.oldest).min())
}

/// Removes every lease: on an exclusive backend their owners are dead.
pub(crate) fn clear_stale_leases(backend: &dyn Bigtable) -> Result<()> {
    let ops: Vec<Op> = backend.meta_scan(LEASE_PREFIX)?.into_iter().map(|(key, _)| Op::MetaDelete { key }).collect();
    backend.apply(ops)?;
    Ok(())
}

/// On a shared (non-exclusive) backend, waits until no other worker holds a live lease in the
/// backend's metadata, up to one lease period (a worker that crashed a moment ago still holds
/// one), removing expired leases; fails if another worker is still alive then.
///
/// A store with an oracle of its own ([`Oracle::open`](crate::Oracle::open)) runs it over the
/// backend's high-water mark and hands out timestamps from a reserved range: two such stores
/// at once would hand out overlapping, unordered timestamps and break snapshot isolation. So
/// one of them at a time uses a shared backend; hosts that share it use the oracle service
/// (their leases live in etcd).
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
                #[cfg(feature = "failpoints")]
                if fail::eval("lease-heartbeat", |_| ()).is_some() {
                    continue;
                }
                // A failed refresh is retried at the next beat; the lease has two beats of slack.
                let _ = inner.liveness.renew(&inner);
            }
        })
        .expect("spawning the lease heartbeat thread");
}
