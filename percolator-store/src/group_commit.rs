//! Group commit: many callers' operations, one underlying commit.
//!
//! Leader/follower, with no dedicated thread: a caller enqueues its ops; if no commit is in
//! progress it becomes the leader, drains the whole queue, runs one backend commit (for redb:
//! one write transaction and one fsync) and hands every caller its own outcomes; callers that
//! arrived meanwhile wait and are served by the next round. An uncontended caller therefore
//! pays no thread hand-off, and under contention the fsync cost is shared.
//!
//! Gathering: without help, a round holds only the callers that queued while the previous
//! round committed — about half of the concurrent callers, since the other half are still
//! preparing their next operation. So a leader waits, at most as long as the previous commit
//! took (bounded by [`MAX_GATHER`]), until as many callers have queued as took part in the
//! previous round or arrived during it. A lone caller never waits.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// Upper bound of ops in one underlying commit (bounds the write transaction's size).
const MAX_BATCH_OPS: usize = 4096;

/// What one caller submits: its size counts against [`MAX_BATCH_OPS`].
pub(crate) trait Work {
    /// How many ops (rows, metadata keys) this is.
    fn weight(&self) -> usize;
}

/// Longest a leader waits for more callers before committing.
const MAX_GATHER: Duration = Duration::from_millis(2);

/// Where a leader puts one caller's outcome; the caller reads it after `leader_done`.
type Slot<O> = Arc<Mutex<Option<Result<O>>>>;

struct Pending<W, O> {
    work: W,
    slot: Slot<O>,
}

struct Queue<W, O> {
    pending: VecDeque<Pending<W, O>>,
    leader_active: bool,
    /// Callers seen around the last round (its size plus those who queued during it): how
    /// many a leader expects to gather.
    expected: usize,
    /// How long the last underlying commit took: the most a leader waits to gather.
    last_commit: Duration,
    /// A leader is gathering (waiting for more callers before it commits).
    gathering: bool,
    /// Set by [`GroupCommit::hurry`]: the gathering leader commits what it has.
    hurry: bool,
}

impl<W, O> Default for Queue<W, O> {
    fn default() -> Queue<W, O> {
        Queue {
            pending: VecDeque::new(),
            leader_active: false,
            expected: 0,
            last_commit: Duration::ZERO,
            gathering: false,
            hurry: false,
        }
    }
}

/// Commits a batch (one work item per caller) in one underlying transaction, returning one
/// outcome per item.
pub(crate) type CommitFn<'a, W, O> = dyn Fn(&[&W]) -> Result<Vec<O>> + 'a;

/// Batches work from concurrent callers into shared commits.
pub(crate) struct GroupCommit<W, O> {
    queue: Mutex<Queue<W, O>>,
    /// Signalled when a leader finishes, so a waiting caller can take over leadership.
    leader_done: Condvar,
    /// Signalled when a caller queues, for a leader that is gathering.
    arrived: Condvar,
}

impl<W: Work, O> GroupCommit<W, O> {
    pub(crate) fn new() -> GroupCommit<W, O> {
        GroupCommit { queue: Mutex::new(Queue::default()), leader_done: Condvar::new(), arrived: Condvar::new() }
    }

    /// Submits `work` and returns its outcome once it is committed. `commit` applies a batch in
    /// one underlying transaction; it returns one outcome per submitted item, or an error that
    /// fails the whole batch.
    pub(crate) fn submit(&self, work: W, commit: &CommitFn<'_, W, O>) -> Result<O> {
        let slot: Slot<O> = Arc::new(Mutex::new(None));
        let mut q = self.queue.lock().map_err(|_| Error::Closed)?;
        q.pending.push_back(Pending { work, slot: slot.clone() });
        if q.leader_active {
            self.arrived.notify_one();
        }
        loop {
            // Served by another leader?
            if let Some(r) = slot.lock().map_err(|_| Error::Closed)?.take() {
                return r;
            }
            if !q.leader_active {
                break;
            }
            q = self.leader_done.wait(q).map_err(|_| Error::Closed)?;
        }
        // Lead: drain and commit rounds until our own slot is filled.
        q.leader_active = true;
        // If `commit` panics, hand leadership back so the other callers are not stuck forever.
        let _leader = LeaderGuard(self);
        loop {
            let deadline = Instant::now() + q.last_commit.min(MAX_GATHER);
            q.gathering = true;
            q.hurry = false;
            while q.pending.len() < q.expected && !q.hurry {
                let now = Instant::now();
                if now >= deadline {
                    break;
                }
                q = self.arrived.wait_timeout(q, deadline - now).map_err(|_| Error::Closed)?.0;
            }
            q.gathering = false;
            let mut batch = Vec::new();
            let mut n = 0;
            while !q.pending.is_empty() && (n == 0 || n + q.pending[0].work.weight() <= MAX_BATCH_OPS) {
                let p = q.pending.pop_front().expect("checked non-empty");
                n += p.work.weight();
                batch.push(p);
            }
            drop(q);
            if batch.is_empty() {
                // Our own op was taken by an earlier round that failed before delivering (a
                // panic): give up rather than spin.
                return Err(Error::Closed);
            }
            let groups: Vec<&W> = batch.iter().map(|p| &p.work).collect();
            let started = Instant::now();
            // If `commit` panics, every caller of this round gets an error instead of waiting
            // forever for an answer.
            let undelivered = Undelivered(&batch);
            let result = commit(&groups);
            std::mem::forget(undelivered);
            let took = started.elapsed();
            match result {
                Ok(outcomes) => {
                    for (p, o) in batch.iter().zip(outcomes) {
                        deliver(&p.slot, Ok(o));
                    }
                }
                Err(e) => {
                    // Every caller of the round gets the same error, as it was (not wrapped
                    // again: its variant is what callers branch on).
                    for p in &batch {
                        deliver(&p.slot, Err(e.clone()));
                    }
                }
            }
            q = self.queue.lock().map_err(|_| Error::Closed)?;
            q.expected = batch.len() + q.pending.len();
            q.last_commit = took;
            let mine = slot.lock().map_err(|_| Error::Closed)?.take();
            if let Some(r) = mine {
                drop(q);
                return r;
            }
        }
    }
}

impl<W, O> GroupCommit<W, O> {
    /// Makes a leader that is gathering commit what it has now: someone waits for work that is
    /// queued (a reader at the 1PC fence), so waiting for more callers would only delay it. A
    /// hint: nothing happens if no leader is gathering (`docs/design.md`, "Group commit").
    pub(crate) fn hurry(&self) {
        if let Ok(mut q) = self.queue.lock()
            && q.gathering
            && !q.hurry
        {
            q.hurry = true;
            self.arrived.notify_one();
        }
    }
}

/// Answers every caller of a round with `Closed` if the round unwinds before answering.
struct Undelivered<'a, W, O>(&'a [Pending<W, O>]);

impl<W, O> Drop for Undelivered<'_, W, O> {
    fn drop(&mut self) {
        for p in self.0 {
            deliver(&p.slot, Err(Error::Closed));
        }
    }
}

struct LeaderGuard<'a, W, O>(&'a GroupCommit<W, O>);

impl<W, O> Drop for LeaderGuard<'_, W, O> {
    fn drop(&mut self) {
        if let Ok(mut q) = self.0.queue.lock() {
            q.leader_active = false;
        }
        self.0.leader_done.notify_all();
    }
}

fn deliver<O>(slot: &Slot<O>, r: Result<O>) {
    if let Ok(mut g) = slot.lock() {
        *g = Some(r);
    }
}
