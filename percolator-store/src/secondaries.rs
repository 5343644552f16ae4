//! Committing secondaries after the commit point, off the caller's path.
//!
//! Once the primary's commit record is durable the transaction is committed; its secondaries'
//! commit records only save readers the roll-forward they would otherwise do (paper §2.2). So
//! with [`StoreConfig::async_secondaries`](crate::StoreConfig::async_secondaries) the caller
//! returns right after the commit point and one background thread per store writes the
//! secondaries, batching those of several transactions into one `apply`. The queue is
//! bounded: when it is full, the caller commits its secondaries itself (backpressure, and
//! memory stays bounded). Closing the store writes what is queued before it returns.
//!
//! Nothing here is needed for correctness: a crash with secondaries queued leaves their locks,
//! and whoever meets one finds the primary committed and rolls it forward — the path every
//! failure after the commit point already takes (`docs/design.md`, "Transactions").

use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;

use fail::fail_point;

use crate::bigtable::{Bigtable, Op};

/// Transactions whose secondaries can wait in the queue.
const QUEUE: usize = 1024;

/// Rows of secondaries written per `apply` (between batches the next waiting ones are added).
pub(crate) const SECONDARY_BATCH: usize = 1024;

/// Writes secondaries' commit records; unconditional and idempotent (a resolver that rolled a
/// secondary forward wrote the same record). Failures are left to readers. With feature
/// `failpoints` and a failpoint configured the first row goes alone, and
/// `after-commit-first-secondary` follows it.
pub(crate) fn commit(backend: &dyn Bigtable, ops: Vec<Op>) {
    let mut ops = ops;
    let mut first = true;
    while !ops.is_empty() {
        let take = if first && crate::failpoints_configured() { 1 } else { ops.len().min(SECONDARY_BATCH) };
        let rest = ops.split_off(take);
        if let Err(e) = backend.apply(ops) {
            tracing::debug!(error = %e, "committing secondaries failed; readers roll them forward");
            return;
        }
        if first {
            fail_point!("after-commit-first-secondary", |_| {});
            first = false;
        }
        ops = rest;
    }
}

/// The background writer of one store.
pub(crate) struct AsyncSecondaries {
    sender: Mutex<Option<SyncSender<Vec<Op>>>>,
    /// Transactions queued and not yet written, and its signal.
    queued: Arc<(Mutex<u64>, Condvar)>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl AsyncSecondaries {
    pub(crate) fn start(backend: Arc<dyn Bigtable>) -> AsyncSecondaries {
        let (sender, receiver) = sync_channel(QUEUE);
        let queued = Arc::new((Mutex::new(0u64), Condvar::new()));
        let q = queued.clone();
        let thread = std::thread::Builder::new()
            .name("percolator-secondaries".into())
            .spawn(move || write_loop(backend.as_ref(), &receiver, &q))
            .expect("spawning the secondaries thread");
        AsyncSecondaries { sender: Mutex::new(Some(sender)), queued, thread: Mutex::new(Some(thread)) }
    }

    /// Queues one transaction's secondaries; gives them back if the queue is full or closed
    /// (the caller then writes them itself).
    pub(crate) fn submit(&self, ops: Vec<Op>) -> Result<(), Vec<Op>> {
        let sender = self.sender.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(sender) = sender.as_ref() else { return Err(ops) };
        *self.queued.0.lock().unwrap_or_else(PoisonError::into_inner) += 1;
        match sender.try_send(ops) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(ops) | TrySendError::Disconnected(ops)) => {
                finished(&self.queued, 1);
                Err(ops)
            }
        }
    }

    /// Waits until every queued transaction's secondaries are written (or failed).
    pub(crate) fn wait(&self) {
        let (count, cv) = &*self.queued;
        let guard = count.lock().unwrap_or_else(PoisonError::into_inner);
        let _unused = cv.wait_while(guard, |n| *n > 0).unwrap_or_else(PoisonError::into_inner);
    }

    /// Writes what is queued and stops the thread.
    pub(crate) fn close(&self) {
        self.sender.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(t) = self.thread.lock().unwrap_or_else(PoisonError::into_inner).take()
            && t.join().is_err()
        {
            tracing::warn!("the secondaries thread had panicked; readers roll its transactions forward");
        }
    }
}

fn finished(queued: &(Mutex<u64>, Condvar), n: u64) {
    let mut count = queued.0.lock().unwrap_or_else(PoisonError::into_inner);
    *count = count.saturating_sub(n);
    if *count == 0 {
        queued.1.notify_all();
    }
}

fn write_loop(backend: &dyn Bigtable, receiver: &Receiver<Vec<Op>>, queued: &(Mutex<u64>, Condvar)) {
    while let Ok(mut ops) = receiver.recv() {
        let mut jobs = 1;
        // Whatever else is waiting goes in the same apply, up to a batch.
        while ops.len() < SECONDARY_BATCH {
            match receiver.try_recv() {
                Ok(more) => {
                    ops.extend(more);
                    jobs += 1;
                }
                Err(_) => break,
            }
        }
        // A panicking backend must not leave `wait` waiting for ever.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| commit(backend, ops)));
        finished(queued, jobs);
    }
}
