//! Worker liveness tokens: the Chubby-lease analog.
//!
//! Each open [`Store`](crate::Store) is a worker with a unique id (a timestamp from the oracle)
//! and a lease, refreshed by a heartbeat thread at a third of the lease period, that carries
//! what the worker publishes ([`Published`]). A lock whose worker's lease has expired belongs
//! to a dead worker and may be cleaned up at once. Where the lease lives is the store's
//! [`Coordination`](crate::backends::Coordination)'s business (the backend's metadata for a
//! store alone, etcd for hosts sharing a backend); this file is what the protocol does with it.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, PoisonError, Weak};
use std::time::Duration;

use crate::coordination::Published;
use crate::error::Result;
use crate::store::Inner;
use crate::timestamp::Timestamp;

/// The wall clock of leases (and of locks' TTLs, pins, dead letters): kept importable from here.
pub(crate) use crate::clock::now_ms;

/// Renews the lease (the heartbeat), then writes what the worker publishes now. A lease found
/// expired (the worker stalled for a whole period) is replaced: other workers treated this one
/// as dead meanwhile, and may have rolled back its locks, so its transactions in flight will
/// fail to commit.
fn renew(inner: &Inner) -> Result<()> {
    if let Some(renewed) = inner.coordination().keep_alive(inner.worker)? {
        inner.lease_renewed(renewed);
    }
    publish(inner)
}

/// Writes this store's lease now, with what it publishes now.
pub(crate) fn publish(inner: &Inner) -> Result<()> {
    let published = Published {
        oldest: inner.oldest_start()?,
        acked_registry: inner.acked_registry.load(Ordering::SeqCst),
        scanning: inner.scanners.load(Ordering::SeqCst) > 0,
    };
    if let Some(renewed) = inner.coordination().write_lease(inner.worker, inner.config.worker_lease, published)? {
        inner.lease_renewed(renewed);
    }
    Ok(())
}

/// Reads of a transaction on a shared backend are trusted only while the worker's lease is
/// surely alive in every other worker's eyes: until its expiry less this margin (clock rates).
pub(crate) fn lease_margin(period: Duration) -> u64 {
    (period.as_millis() as u64 / 10).max(500)
}

/// Other live workers that have not acknowledged registry `version`.
pub(crate) fn behind_registry(inner: &Inner, version: Timestamp) -> Result<Vec<u64>> {
    let me = inner.worker;
    Ok(inner
        .coordination()
        .live_leases()?
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
    let live = inner.coordination().live_leases()?;
    Ok(live.into_iter().filter(|(id, _)| *id != inner.worker).map(|(_, p)| p.oldest).min())
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

/// Held by the lease heartbeat while a beat holds the store, and taken by the drop of the last
/// of the user's handles of the store (`store::Handle`): that drop returns only once a beat
/// under way let go of the store — and closed it, if the beat held the last reference — so
/// that a file the store had open opens again at once. (Until it was, an open right after the
/// drop could meet the file still held and fail with `AlreadyOpen`.)
#[derive(Default)]
pub(crate) struct Beat(pub(crate) Mutex<()>);

/// Spawns the lease heartbeat. It holds only a weak reference, so it never keeps a store alive,
/// and holds it only within `beat` ([`Beat`]).
pub(crate) fn spawn_heartbeat(inner: Weak<Inner>, stop: Arc<Stop>, lease: Duration, beat: Arc<Beat>) {
    std::thread::Builder::new()
        .name("percolator-lease".into())
        .spawn(move || {
            while !stop.sleep(lease / 3) {
                let _beating = beat.0.lock().unwrap_or_else(PoisonError::into_inner);
                // Dropped before `_beating` (declared after it).
                let Some(inner) = inner.upgrade() else { return };
                #[cfg(feature = "failpoints")]
                {
                    fail::fail_point!("lease-heartbeat-beating");
                    if fail::eval("lease-heartbeat", |_| ()).is_some() {
                        continue;
                    }
                }
                // A failed refresh is retried at the next beat; the lease has two beats of slack.
                let _ = renew(&inner);
            }
        })
        .expect("spawning the lease heartbeat thread");
}
