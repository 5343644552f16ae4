//! The timestamp oracle of a store: strictly increasing timestamps that survive crashes, from
//! the store's [`Coordination`] (in process over the backend, `backend_coordination.rs`, or a
//! service shared by every host of a backend), counted and sampled for freshness.

use std::any::Any;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::backend_coordination::BackendCoordination;
use crate::bigtable::Bigtable;
use crate::clock::Clock;
use crate::coordination::Coordination;
use crate::error::Result;
use crate::timestamp::Timestamp;

/// The timestamp oracle: strictly increasing timestamps. Over an exclusive backend it runs in
/// this process ([`Oracle::open`]); hosts sharing a backend ask one oracle service (a shared
/// [`Coordination`](crate::backends::Coordination), given to [`Oracle::new`]). It owns the
/// store's coordination, which keeps the worker leases too. All clones of a
/// [`Store`](crate::Store) use one.
pub struct Oracle {
    coordination: Box<dyn Coordination>,
    /// Timestamps handed out by this process (the oracle's rate, in `Metrics`).
    issued: AtomicU64,
    /// When they were handed out, sampled (freshness; see `clock.rs`).
    clock: Clock,
}

impl Oracle {
    /// Opens the in-process oracle over `backend`, resuming above its persisted high-water mark
    /// ([`BackendCoordination`](crate::backends::BackendCoordination)).
    pub fn open(backend: Arc<dyn Bigtable>) -> Result<Oracle> {
        Ok(Oracle::new(BackendCoordination::open(backend)?))
    }

    /// Like [`Oracle::open`] with a custom reservation size (small ranges exercise the persist path).
    pub fn with_range(backend: Arc<dyn Bigtable>, range: u64) -> Result<Oracle> {
        Ok(Oracle::new(BackendCoordination::with_range(backend, range)?))
    }

    /// The oracle over `coordination`'s timestamps (and, under a store, its worker leases).
    pub fn new(coordination: impl Coordination) -> Oracle {
        Oracle { coordination: Box::new(coordination), issued: AtomicU64::new(0), clock: Clock::default() }
    }

    /// The coordination under this oracle, if it is a `C` (for what only that implementation
    /// has, such as the address of a host's own oracle candidate).
    pub fn coordination<C: Coordination>(&self) -> Option<&C> {
        let any: &dyn Any = self.coordination.as_ref();
        any.downcast_ref()
    }

    /// The coordination under this oracle, as the protocol sees it.
    pub(crate) fn seam(&self) -> &dyn Coordination {
        self.coordination.as_ref()
    }

    /// Whether this oracle is a service shared by every host (not one process's own).
    pub fn is_shared(&self) -> bool {
        self.coordination.shared().is_some()
    }

    /// Returns a timestamp greater than every timestamp this oracle (or any earlier incarnation
    /// on the same store, or, for a shared oracle, any host) has returned before this call.
    pub fn next(&self) -> Result<Timestamp> {
        let ts = self.coordination.next_timestamp()?;
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
        self.coordination.persists()
    }
}
