//! The coordination seam, beside the data seam ([`Bigtable`](crate::backends::Bigtable)): what
//! the protocol asks of the paper's timestamp oracle and of Chubby.
//!
//! - **Timestamps** (§2.4): strictly increasing, never reused, even across crashes.
//! - **Worker leases** (§2.2, the liveness tokens): each open [`Store`](crate::Store) is a worker
//!   with a lease that carries what it publishes ([`Published`]); the protocol writes it,
//!   renews it, lists the live ones (GC's safepoint, the registry's acknowledgements, the
//!   scanners' shares), asks whether one is alive (a lock whose worker is dead may be cleaned at
//!   once) and revokes its own at a clean close.
//!
//! A store runs with one [`Coordination`], owned by its [`Oracle`](crate::Oracle). Two
//! implementations exist: [`BackendCoordination`](crate::backends::BackendCoordination) in this
//! crate (the oracle in process over the backend's high-water mark, leases as rows of the
//! backend's metadata: one store per backend at a time), and the etcd one of the
//! `percolator-redis` crate (the oracle service and etcd leases, shared by every host of a
//! backend). The protocol names only this trait.

use std::any::Any;
use std::time::Duration;

use crate::error::Result;
use crate::timestamp::Timestamp;

/// What the protocol asks of the timestamp oracle and of Chubby. One instance serves one store
/// (one worker): it may keep that worker's lease state (an etcd lease id) itself.
pub trait Coordination: Any + Send + Sync {
    /// A timestamp greater than every timestamp this coordination (or an earlier incarnation
    /// over the same store, or, for a shared one, any store) handed out before this call. May
    /// be called from many threads at once.
    fn next_timestamp(&self) -> Result<Timestamp>;

    /// How many high-water-mark persists this process did (what the oracle's metrics show; 0
    /// where the mark is not this process's to persist).
    fn persists(&self) -> u64 {
        0
    }

    /// `None` for a coordination of one store alone (several would hand out overlapping
    /// timestamps); for a service that any number of stores of one backend share, a
    /// description of it, which the store records in the backend: from then on a store with a
    /// coordination of its own refuses that backend.
    fn shared(&self) -> Option<String>;

    /// Writes `worker`'s lease, expiring `period` from now, with what it publishes. Returns
    /// the lease's new expiry and when the request that set it was sent (wall-clock ms) if
    /// this write (re)started the lease's period, `None` if the period runs on unchanged
    /// (renewed by [`Coordination::keep_alive`]).
    fn write_lease(&self, worker: u64, period: Duration, published: Published) -> Result<Option<Renewed>>;

    /// The heartbeat's renewal, before the worker writes its lease again: `Some` if it
    /// restarted the lease's period. A lease found expired (the worker stalled for a whole
    /// period) is dropped, so that the next [`Coordination::write_lease`] takes a new one.
    fn keep_alive(&self, worker: u64) -> Result<Option<Renewed>> {
        let _ = worker;
        Ok(None)
    }

    /// The live leases: worker id and what each publishes.
    fn live_leases(&self) -> Result<Vec<(u64, Published)>>;

    /// True if `worker`'s lease is unexpired.
    fn lease_alive(&self, worker: u64) -> Result<bool>;

    /// Ends `worker`'s lease (a clean close), so its locks are resolvable at once.
    fn revoke_lease(&self, worker: u64) -> Result<()>;

    /// Called when a store opens on an exclusive backend (one process owns it): every lease
    /// found there belongs to an earlier, dead incarnation.
    fn clear_dead_leases(&self) -> Result<()> {
        Ok(())
    }
}

/// What a worker publishes in its lease.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Published {
    /// A timestamp at or below the start of every transaction of the worker that runs now or
    /// starts later (GC's share of the safepoint on a shared backend; `worker::shared_safepoint`).
    pub oldest: Timestamp,
    /// The registry version whose notify cells every commit of the worker sets from now on
    /// (see `registry::acknowledge`).
    pub acked_registry: u64,
    /// Whether the worker runs a scanner (it takes a share of the notify partitions).
    pub scanning: bool,
}

/// A lease (re)started: when the request was sent and the expiry it set (wall-clock ms).
#[derive(Clone, Copy, Debug)]
pub struct Renewed {
    /// When the request that (re)started the lease was sent.
    pub sent: u64,
    /// When the lease expires unless renewed.
    pub expiry: u64,
}

/// A lease value: expiry in wall-clock milliseconds, then what the worker publishes (the form
/// both implementations store; a lease whose store expires it itself writes `u64::MAX`).
pub fn encode_lease(expiry: u64, published: Published) -> Vec<u8> {
    let mut value = expiry.to_le_bytes().to_vec();
    value.extend_from_slice(&published.oldest.raw().to_le_bytes());
    value.extend_from_slice(&published.acked_registry.to_le_bytes());
    value.push(u8::from(published.scanning));
    value
}

/// A lease value's expiry and what it publishes. Older leases lack fields: a lease without an
/// oldest start publishes zero (nothing may be collected while it lives), one without a
/// registry version has acknowledged none, one without a scanner flag runs no scanner.
pub fn decode_lease(value: &[u8]) -> Option<(u64, Published)> {
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
