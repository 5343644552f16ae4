//! Group commit: many callers' operations, one underlying commit.
//!
//! Leader/follower, with no dedicated thread: a caller enqueues its ops; if no commit is in
//! progress it becomes the leader, opens one backend commit (for redb: one write transaction
//! and one fsync), applies the queued callers' work in it, commits, and hands every caller its
//! own outcomes; callers that arrive after the round is closed wait and are served by the next
//! round. An uncontended caller therefore pays no thread hand-off, and under contention the
//! fsync cost is shared.
//!
//! Gathering (where the backend asks for it: rounds with an fsync to share): without help, a
//! round holds only the callers that queued while the previous round committed — about half
//! of the concurrent callers, since the other half are still preparing their next operation.
//! So a leader waits, at most as long as the previous commit took (bounded by
//! [`MAX_GATHER`]), until as many callers have been taken as took part in the previous round
//! or arrived during it. A lone caller never waits. It waits with the round open: the work
//! already taken is applied while the others prepare theirs (`docs/design.md`, "Applying
//! while gathering").
//!
//! Polling (where rounds take microseconds: no fsync to share, so no gathering): a caller whose
//! work is queued first yields its core, checking between yields whether it was answered or
//! the leadership is free, for at most [`POLL`], and only then sleeps. Its answer usually comes
//! within that time, so it needs no wakeup, and a core with nothing else to run polls instead of
//! going idle (`docs/design.md`, "Polling before sleeping").

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// Upper bound of ops in one underlying commit (bounds the write transaction's size), but for
/// one caller's work larger than it (a one-phase commit of up to `ONE_PHASE_MAX_ROWS`, 8,192
/// rows, is one atomic group): a round takes such work alone.
const MAX_BATCH_OPS: usize = 4096;

/// What one caller submits: its size counts against [`MAX_BATCH_OPS`].
pub(crate) trait Work {
    /// How many ops (rows, metadata keys) this is.
    fn weight(&self) -> usize;
}

/// Longest a leader waits for more callers before committing.
const MAX_GATHER: Duration = Duration::from_millis(2);

/// Longest a caller of a group commit that does not gather polls for its answer (yielding its
/// core between checks) before it sleeps: a few rounds at durability none.
const POLL: Duration = Duration::from_micros(50);

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
    /// A leader's round is open (it may wait for more callers before it commits).
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

/// Applies one round in one underlying transaction: calls `next` for each caller's work, in
/// queue order, until it answers `None` (the round is closed: `next` may wait a little for more
/// callers first, see the module docs), then commits; returns one outcome per work item taken,
/// in order, or an error that fails the round.
pub(crate) type CommitFn<'a, W, O> = dyn Fn(&mut dyn FnMut() -> Option<W>) -> Result<Vec<O>> + 'a;

/// Batches work from concurrent callers into shared commits.
pub(crate) struct GroupCommit<W, O> {
    /// The longest a leader gathers (waits for more callers, the module docs' rule):
    /// [`MAX_GATHER`], or zero where a round has no fixed cost (an fsync) to share.
    max_gather: Duration,
    /// How long a waiting caller polls before it sleeps: [`POLL`] where leaders do not gather
    /// (rounds take microseconds), zero where they do (a round takes an fsync).
    poll: Duration,
    queue: Mutex<Queue<W, O>>,
    /// [`Queue::leader_active`], readable without the queue's lock by a polling caller.
    leading: AtomicBool,
    /// Signalled when a leader finishes, so a waiting caller can take over leadership.
    leader_done: Condvar,
    /// Signalled when a caller queues, for a leader that is gathering.
    arrived: Condvar,
}

/// What a leader knows of the round it is filling.
struct Round<O> {
    /// The callers taken into it, in order, to be answered after its commit.
    taken: Vec<Slot<O>>,
    /// Their ops, against [`MAX_BATCH_OPS`].
    weight: usize,
    /// How many callers the leader waits for (the gathering rule).
    expected: usize,
    /// The most it waits for them.
    deadline: Instant,
    /// Time spent waiting for callers (not part of the commit's duration).
    waited: Duration,
}

impl<W: Work, O> GroupCommit<W, O> {
    /// A group commit whose leaders gather (`gather`; their callers sleep while they wait) or
    /// close a round as soon as the queue is empty (their callers poll first).
    pub(crate) fn new(gather: bool) -> GroupCommit<W, O> {
        GroupCommit::with(if gather { MAX_GATHER } else { Duration::ZERO }, if gather { Duration::ZERO } else { POLL })
    }

    /// A group commit whose leaders gather for at most `max_gather` and whose waiting callers
    /// poll for at most `poll` before they sleep (zero: not at all).
    fn with(max_gather: Duration, poll: Duration) -> GroupCommit<W, O> {
        GroupCommit {
            max_gather,
            poll,
            queue: Mutex::new(Queue::default()),
            leading: AtomicBool::new(false),
            leader_done: Condvar::new(),
            arrived: Condvar::new(),
        }
    }

    /// Submits `work` and returns its outcome once it is committed. `commit` applies one round
    /// in one underlying transaction, taking each caller's work from the `next` it is given
    /// ([`CommitFn`]); it returns one outcome per item taken, or an error that fails the round.
    pub(crate) fn submit(&self, work: W, commit: &CommitFn<'_, W, O>) -> Result<O> {
        let slot: Slot<O> = Arc::new(Mutex::new(None));
        let mut q = self.queue.lock().map_err(|_| Error::Closed)?;
        q.pending.push_back(Pending { work, slot: slot.clone() });
        if q.leader_active {
            self.arrived.notify_one();
        }
        let mut polled = false;
        loop {
            // Served by another leader?
            if let Some(r) = slot.lock().map_err(|_| Error::Closed)?.take() {
                return r;
            }
            if !q.leader_active {
                break;
            }
            if !polled && !self.poll.is_zero() {
                // Once per submission: a caller woken from its sleep sleeps again if it must.
                polled = true;
                drop(q);
                if let Some(r) = self.poll_for(&slot)? {
                    return r;
                }
                q = self.queue.lock().map_err(|_| Error::Closed)?;
                continue;
            }
            q = self.leader_done.wait(q).map_err(|_| Error::Closed)?;
        }
        // Lead: commit rounds until our own slot is filled.
        q.leader_active = true;
        self.leading.store(true, Ordering::Relaxed);
        // If `commit` panics, hand leadership back so the other callers are not stuck forever.
        let _leader = LeaderGuard(self);
        loop {
            if q.pending.is_empty() {
                // Our own op was taken by an earlier round that failed before delivering (a
                // panic): give up rather than spin.
                return Err(Error::Closed);
            }
            let round = RefCell::new(Round {
                taken: Vec::new(),
                weight: 0,
                expected: q.expected,
                deadline: Instant::now() + q.last_commit.min(self.max_gather),
                waited: Duration::ZERO,
            });
            // The round is open: a hurry from now on closes it once the queue is empty.
            q.gathering = true;
            q.hurry = false;
            drop(q);
            let started = Instant::now();
            // If `commit` panics, every caller taken into this round gets an error instead of
            // waiting forever for an answer.
            let undelivered = Undelivered(&round);
            let result = commit(&mut || self.next_work(&round));
            std::mem::forget(undelivered);
            let Round { taken, weight, waited, .. } = round.into_inner();
            let took = started.elapsed().saturating_sub(waited);
            let result = match result {
                Ok(outcomes) if outcomes.len() != taken.len() => Err(Error::Storage(format!(
                    "group commit: the round answered {} outcomes for {} callers",
                    outcomes.len(),
                    taken.len()
                ))),
                Ok(_) if taken.is_empty() => {
                    Err(Error::Storage("group commit: the round took no caller's work".into()))
                }
                r => r,
            };
            let failed = match result {
                Ok(outcomes) => {
                    for (slot, o) in taken.iter().zip(outcomes) {
                        deliver(slot, Ok(o));
                    }
                    None
                }
                Err(e) => {
                    // Every caller of the round gets the same error, as it was (not wrapped
                    // again: its variant is what callers branch on).
                    for slot in &taken {
                        deliver(slot, Err(e.clone()));
                    }
                    Some(e)
                }
            };
            q = self.queue.lock().map_err(|_| Error::Closed)?;
            q.gathering = false;
            if let Some(e) = failed
                && taken.is_empty()
            {
                // Refused before it took anyone (a storage failure): it fails the callers it
                // would have taken, or they (this leader among them) would be offered to the
                // same refusal again and again. A round that failed after taking work fails
                // only those; the others are the next round's.
                let mut n = weight;
                while !q.pending.is_empty() && (n == 0 || n + q.pending[0].work.weight() <= MAX_BATCH_OPS) {
                    let p = q.pending.pop_front().expect("checked non-empty");
                    n += p.work.weight();
                    deliver(&p.slot, Err(e.clone()));
                }
            }
            q.expected = taken.len() + q.pending.len();
            q.last_commit = took;
            let mine = slot.lock().map_err(|_| Error::Closed)?.take();
            if let Some(r) = mine {
                drop(q);
                return r;
            }
        }
    }

    /// Polls for `slot`'s answer for at most [`GroupCommit::poll`], yielding the core between
    /// checks (to any thread that has work; with none, the core polls instead of going idle,
    /// and the answer needs no wakeup). Stops early once no leader is active: then the caller
    /// must look at the queue again, and perhaps lead. `None`: not answered yet.
    fn poll_for(&self, slot: &Slot<O>) -> Result<Option<Result<O>>> {
        let started = Instant::now();
        while started.elapsed() < self.poll {
            std::thread::yield_now();
            if let Some(r) = slot.lock().map_err(|_| Error::Closed)?.take() {
                return Ok(Some(r));
            }
            if !self.leading.load(Ordering::Relaxed) {
                break;
            }
        }
        Ok(None)
    }

    /// The next caller's work for the open round, in queue order; `None` closes the round.
    /// With the queue empty, waits for more callers while the round has fewer than it expects,
    /// until its deadline or a hurry (the leader's write transaction stays open meanwhile, with
    /// the work taken so far already applied).
    fn next_work(&self, round: &RefCell<Round<O>>) -> Option<W> {
        // A poisoned queue closes the round: the leader then answers what it took.
        let mut q = self.queue.lock().ok()?;
        loop {
            let mut r = round.borrow_mut();
            if let Some(front) = q.pending.front() {
                if !r.taken.is_empty() && r.weight + front.work.weight() > MAX_BATCH_OPS {
                    q.gathering = false;
                    return None;
                }
                let p = q.pending.pop_front().expect("checked non-empty");
                r.weight += p.work.weight();
                r.taken.push(p.slot);
                return Some(p.work);
            }
            let now = Instant::now();
            if r.taken.len() >= r.expected || q.hurry || now >= r.deadline {
                q.gathering = false;
                return None;
            }
            let wait = r.deadline - now;
            drop(r);
            q = self.arrived.wait_timeout(q, wait).ok()?.0;
            round.borrow_mut().waited += now.elapsed();
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

/// Answers every caller taken into a round with `Closed` if the round unwinds before answering.
struct Undelivered<'a, O>(&'a RefCell<Round<O>>);

impl<O> Drop for Undelivered<'_, O> {
    fn drop(&mut self) {
        if let Ok(round) = self.0.try_borrow() {
            for slot in &round.taken {
                deliver(slot, Err(Error::Closed));
            }
        }
    }
}

struct LeaderGuard<'a, W, O>(&'a GroupCommit<W, O>);

impl<W, O> Drop for LeaderGuard<'_, W, O> {
    fn drop(&mut self) {
        if let Ok(mut q) = self.0.queue.lock() {
            q.leader_active = false;
            self.0.leading.store(false, Ordering::Relaxed);
        }
        self.0.leader_done.notify_all();
    }
}

fn deliver<O>(slot: &Slot<O>, r: Result<O>) {
    if let Ok(mut g) = slot.lock() {
        *g = Some(r);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    impl Work for u64 {
        fn weight(&self) -> usize {
            1
        }
    }

    /// A backend for the tests: each round is logged with the work it took, in the order it
    /// took it, and counted as committed only after a pause (standing for the fsync); a round
    /// whose number `fails` picks fails after taking its work.
    struct Log {
        rounds: Mutex<Vec<Vec<u64>>>,
        committed: AtomicUsize,
        fails: fn(usize) -> bool,
    }

    impl Log {
        fn commit(&self, next: &mut dyn FnMut() -> Option<u64>) -> Result<Vec<(usize, u64)>> {
            let mut round = Vec::new();
            while let Some(w) = next() {
                round.push(w);
            }
            std::thread::sleep(Duration::from_micros(200));
            let mut rounds = self.rounds.lock().unwrap();
            let id = rounds.len();
            rounds.push(round.clone());
            if (self.fails)(id) {
                return Err(Error::Storage(format!("round {id} failed")));
            }
            self.committed.store(id + 1, Ordering::SeqCst);
            Ok(round.into_iter().map(|w| (id, w)).collect())
        }
    }

    /// A caller's work and the answer it got: the round that committed it and the work.
    type Answer = (u64, Result<(usize, u64)>);

    /// 8 callers × 150 submissions each, the leaders gathering or not. Returns, per caller, the
    /// answers it got in order.
    fn run(log: &Log, gather: bool) -> Vec<Vec<Answer>> {
        let group: GroupCommit<u64, (usize, u64)> = GroupCommit::new(gather);
        std::thread::scope(|s| {
            let callers: Vec<_> = (0..8u64)
                .map(|c| {
                    let group = &group;
                    s.spawn(move || {
                        let mut answers = Vec::new();
                        for i in 0..150u64 {
                            let work = c * 1000 + i;
                            let answer = group.submit(work, &|next| log.commit(next));
                            if let Ok((round, _)) = &answer {
                                // Answered only once its round is committed (durable, for redb
                                // at durability fsync).
                                assert!(log.committed.load(Ordering::SeqCst) > *round, "answered before its commit");
                            }
                            answers.push((work, answer));
                        }
                        answers
                    })
                })
                .collect();
            callers.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    /// Every caller is answered with its own work's outcome, only after the round that holds it
    /// committed; a caller's submissions are applied in its own order, each in a later round
    /// than the one before; every piece of work is applied exactly once; and rounds hold
    /// several callers (the work taken while the round gathers). Not gathering changes when a
    /// round closes, none of the rest.
    #[test]
    fn callers_are_answered_with_their_own_outcome_after_their_rounds_commit_in_order() {
        for gather in [true, false] {
            let log = Log { rounds: Mutex::new(Vec::new()), committed: AtomicUsize::new(0), fails: |_| false };
            let answers = run(&log, gather);
            check_answers(log, &answers, gather);
        }
    }

    fn check_answers(log: Log, answers: &[Vec<Answer>], gather: bool) {
        let rounds = log.rounds.into_inner().unwrap();
        for (c, answers) in answers.iter().enumerate() {
            let mut last_round = None;
            for (work, answer) in answers {
                let (round, answered) = answer.as_ref().expect("no round fails");
                assert_eq!(answered, work, "caller {c} got another's outcome");
                assert!(rounds[*round].contains(work), "work {work} answered from a round that did not hold it");
                assert!(last_round < Some(*round), "caller {c}: work {work} applied no later than its predecessor");
                last_round = Some(*round);
            }
        }
        let mut applied: Vec<u64> = rounds.iter().flatten().copied().collect();
        let total = applied.len();
        applied.sort_unstable();
        applied.dedup();
        assert_eq!((applied.len(), total), (8 * 150, 8 * 150), "every piece of work applied exactly once");
        if gather {
            assert!(rounds.len() < 8 * 150, "no round held more than one caller");
        }
    }

    /// A failed round answers its error to every caller it took; none of them waits for ever,
    /// none is answered as committed, and the rounds after it go on.
    #[test]
    fn a_failed_round_fails_exactly_its_callers_and_the_next_rounds_go_on() {
        for gather in [true, false] {
            let log = Log { rounds: Mutex::new(Vec::new()), committed: AtomicUsize::new(0), fails: |id| id % 3 == 1 };
            let answers = run(&log, gather);
            let rounds = log.rounds.into_inner().unwrap();
            let (mut ok, mut failed) = (0, 0);
            for (work, answer) in answers.iter().flatten() {
                match answer {
                    Ok((round, w)) => {
                        assert_eq!(w, work);
                        assert!(round % 3 != 1, "answered as committed from a failed round");
                        ok += 1;
                    }
                    Err(Error::Storage(m)) => {
                        // Exactly the round that failed it held it.
                        let held: Vec<usize> = (0..rounds.len()).filter(|r| rounds[*r].contains(work)).collect();
                        assert_eq!(held.len(), 1, "work {work} failed ({m}) but is in rounds {held:?}");
                        assert_eq!(
                            m,
                            &format!("round {} failed", held[0]),
                            "work {work} failed with another round's error"
                        );
                        failed += 1;
                    }
                    Err(e) => panic!("unexpected error {e}"),
                }
            }
            assert!(ok > 0 && failed > 0, "gather {gather}: {ok} committed, {failed} failed");
        }
    }

    /// A caller polling for its answer when the leader leaves without its work (it queued after
    /// the leader's round closed) takes over the leadership at once, instead of polling on with
    /// nobody leading until its time is up.
    #[test]
    fn a_polling_caller_leads_once_the_leader_leaves() {
        use std::sync::mpsc;
        use std::time::Instant;

        // Polls longer than the test waits: only the leadership check ends it early.
        let group: GroupCommit<u64, u64> = GroupCommit::with(Duration::ZERO, Duration::from_secs(60));
        let (taken_tx, taken_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let release_rx = Mutex::new(release_rx);
        let commit = |next: &mut dyn FnMut() -> Option<u64>| -> Result<Vec<u64>> {
            let taken: Vec<u64> = std::iter::from_fn(next).collect();
            if taken == [1] {
                // The first round holds its leader until the second caller polls.
                taken_tx.send(()).unwrap();
                release_rx.lock().unwrap().recv().unwrap();
            }
            Ok(taken)
        };
        std::thread::scope(|s| {
            let (group, commit) = (&group, &commit);
            let first = s.spawn(move || group.submit(1, commit));
            taken_rx.recv_timeout(Duration::from_secs(5)).expect("the first round took its work");
            let second = s.spawn(move || {
                let started = Instant::now();
                (group.submit(2, commit), started.elapsed())
            });
            // The second caller is queued behind the open round, polling.
            while group.queue.lock().unwrap().pending.is_empty() {
                std::thread::sleep(Duration::from_millis(1));
            }
            std::thread::sleep(Duration::from_millis(20));
            release_tx.send(()).unwrap();
            assert_eq!(first.join().unwrap().unwrap(), 1);
            let (answer, took) = second.join().unwrap();
            assert_eq!(answer.unwrap(), 2);
            assert!(took < Duration::from_secs(10), "the second caller polled on for {took:?} with nobody leading");
        });
    }

    /// A round refused before it takes anyone (a backend whose storage failed refuses at once)
    /// answers its error to the callers it would have taken: without that, the leader would be
    /// offered the same refusal again and again and nobody would be answered.
    #[test]
    fn a_round_refused_before_taking_work_answers_the_queue() {
        use std::sync::atomic::AtomicBool;
        use std::sync::mpsc;

        let refusing = AtomicBool::new(true);
        let group: GroupCommit<u64, u64> = GroupCommit::new(true);
        let commit = |next: &mut dyn FnMut() -> Option<u64>| -> Result<Vec<u64>> {
            if refusing.load(Ordering::SeqCst) {
                return Err(Error::Storage("refused".into()));
            }
            Ok(std::iter::from_fn(next).collect())
        };
        let (tx, rx) = mpsc::channel();
        std::thread::scope(|s| {
            for w in 0..4u64 {
                let (group, tx, commit) = (&group, tx.clone(), &commit);
                s.spawn(move || tx.send(group.submit(w, commit)).unwrap());
            }
            let answers: Vec<_> = (0..4).map(|_| rx.recv_timeout(Duration::from_secs(5))).collect();
            // Let the callers finish whatever happened, then judge.
            refusing.store(false, Ordering::SeqCst);
            for answer in answers {
                match answer {
                    Ok(Err(Error::Storage(m))) => assert_eq!(m, "refused"),
                    Ok(other) => panic!("a caller of a refused round got {other:?}"),
                    Err(_) => panic!("a caller of a refused round was not answered within 5 s"),
                }
            }
        });
        assert_eq!(group.submit(9, &commit).unwrap(), 9, "the rounds after the refusal go on");
    }
}
