//! What became of observer runs, and where they lost to conflicts.
//!
//! Every run (a call of the observer) ends one way: it **committed**, it was **lost to a
//! conflict** (its reads met a lock they could not wait out, or its commit met a newer write or
//! a lock: nothing it wrote is visible, and the notification is run again), or it **failed**
//! (the observer's error, or a storage error in its transaction). A strong observer's
//! notification that its ack already covers is **skipped**, which is no run; neither is an
//! attempt that met an error before the observer was called (reading the ack), though a
//! conflict there backs off all the same. [`Store::run_outcomes`] counts
//! them per observer, in this process (a host saves them with its other per-binding counts).
//!
//! Each lost run is also recorded with the cell its conflict was on, in per-minute buckets of
//! the last [`HOT_ROWS_MINUTES`] minutes, at most [`HOT_CELLS_PER_MINUTE`] cells a minute:
//! [`Store::hot_rows`] answers the cells with the most conflicts over the last minutes.
//!
//! Two things keep runs from being lost over and over on a hot cell (see "Notifications" in
//! `docs/design.md`, also for why neither starves a notification):
//! - a lost (notification, observer) runs again only after a backoff with jitter
//!   ([`conflict_backoff`]);
//! - each observer has a **window** of runs in flight, narrowed by its lost runs and widened by
//!   its commits (additive increase, multiplicative decrease, as TCP's congestion window): an
//!   observer whose runs race each other on one cell comes down to about one run at a time,
//!   which commits as fast as that cell can, while fresh notifications — which a backoff alone
//!   never holds back — wait for a slot instead of losing. One whose runs do not conflict is
//!   never held back.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::bigtable::CellRef;
use crate::store::{Inner, Store};
use crate::worker::now_ms;

/// Minutes of conflicts [`Store::hot_rows`] can look back over.
pub const HOT_ROWS_MINUTES: u32 = 10;

/// Most distinct cells counted per minute; conflicts on further cells that minute are counted
/// only in [`RunOutcomes::lost_to_conflict`] (a bound on memory: the hot cells of a minute are
/// the ones met first and most, and 1,024 is far more than a view shows).
pub const HOT_CELLS_PER_MINUTE: usize = 1024;

/// Most observers named per hot cell and minute (further ones count in the cell's total only).
const OBSERVERS_PER_CELL: usize = 16;

/// First backoff of a run lost to a conflict (before jitter); doubled per further loss.
pub const CONFLICT_BACKOFF: Duration = Duration::from_millis(2);

/// Ceiling of [`CONFLICT_BACKOFF`]'s doubling.
pub const CONFLICT_BACKOFF_MAX: Duration = Duration::from_millis(250);

/// A notification that keeps losing (or is held back by its observer's window) stops backing
/// off once its first loss is this long ago, and may take one slot beyond the window: it then
/// runs at every chance, ahead of newer notifications, which still back off and wait for the
/// window (see `docs/design.md`).
pub const CONFLICT_AGING: Duration = Duration::from_secs(1);

/// What became of one observer's runs (see the module docs); from [`Store::run_outcomes`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunOutcomes {
    /// Runs that committed (with their ack, for a strong observer): the only successful ones.
    pub committed: u64,
    /// Runs lost to a conflict: a read met a lock it could not wait out, or the observer or
    /// the commit returned [`Error::Conflict`](crate::Error::Conflict). Nothing of them is
    /// visible; the notification runs again after a backoff. Never a failure, never a dead
    /// letter.
    pub lost_to_conflict: u64,
    /// Runs that failed: the observer's error (a trap, a deadline, an error it returned) or a
    /// storage error. Counted toward the binding's `max_attempts`.
    pub failed: u64,
    /// Notifications a strong observer skipped: its ack already covered the newest write. Not
    /// runs.
    pub skipped: u64,
}

impl RunOutcomes {
    /// Runs started: `committed + lost_to_conflict + failed`.
    pub fn runs(&self) -> u64 {
        self.committed.saturating_add(self.lost_to_conflict).saturating_add(self.failed)
    }
}

/// How a run ended, for [`Conflicts::record`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RunEnd {
    Committed,
    Lost,
    Failed,
    Skipped,
}

/// A cell with conflicts over the last minutes: [`Store::hot_rows`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct HotRow {
    /// The cell the conflicts were on: the one a lost run's read or commit met a lock or a
    /// newer write on.
    pub cell: CellRef,
    /// Observer runs lost to conflicts on it in the window.
    pub conflicts: u64,
    /// The observers whose runs lost, with how many each, most first.
    pub observers: Vec<(String, u64)>,
    /// Wall-clock milliseconds of the last conflict on it.
    pub last_ms: u64,
}

/// One cell's conflicts of one minute.
#[derive(Default)]
struct HotCount {
    conflicts: u64,
    observers: Vec<(String, u64)>,
    last_ms: u64,
}

/// The conflicts of one minute (minutes counted from the store's open).
#[derive(Default)]
struct Minute {
    minute: u64,
    cells: HashMap<CellRef, HotCount>,
}

/// Most runs of one observer in flight while its runs do not conflict: the window's ceiling
/// (the scanner's workers bound them anyway).
const MAX_RUN_WINDOW: f64 = 1024.0;

/// An observer's window shrinks by this factor per lost run.
const WINDOW_DECREASE: f64 = 0.8;

/// An observer's window grows by this much per window's worth of committed runs (so from 1 to
/// 8 in about 130 commits without a loss).
const WINDOW_INCREASE: f64 = 0.5;

/// How many runs of one observer may be in flight: additive increase (one more per window's
/// worth of committed runs), multiplicative decrease (per lost run), at least one.
struct Window {
    limit: f64,
    running: u32,
    /// A run was held back since a slot was last given back: the next one given back wakes
    /// the scanners, so that a held-back notification runs at once rather than a lap later.
    held_back: bool,
}

/// A run's slot in its observer's window, given back when dropped (also if the observer
/// panics).
pub(crate) struct Slot<'a> {
    inner: &'a Inner,
    observer: &'a str,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let mut windows = self.inner.conflicts.windows.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(w) = windows.get_mut(self.observer) else { return };
        w.running = w.running.saturating_sub(1);
        if std::mem::take(&mut w.held_back) {
            drop(windows);
            self.inner.signal.bump();
        }
    }
}

/// Per-observer run outcomes and the recent conflicts' cells, of this process.
pub(crate) struct Conflicts {
    opened: Instant,
    /// Each observer's window of runs in flight. Single updates under the lock: a poisoned map
    /// is still whole.
    windows: Mutex<HashMap<String, Window>>,
    /// Only single insertions and additions happen under it: a poisoned map is still whole.
    outcomes: Mutex<BTreeMap<String, RunOutcomes>>,
    /// A ring of [`HOT_ROWS_MINUTES`] minutes, indexed by minute modulo its length; a slot
    /// whose `minute` is old is emptied when reused.
    minutes: Mutex<Vec<Minute>>,
}

impl Default for Conflicts {
    fn default() -> Conflicts {
        Conflicts {
            opened: Instant::now(),
            windows: Mutex::new(HashMap::new()),
            outcomes: Mutex::new(BTreeMap::new()),
            minutes: Mutex::new((0..HOT_ROWS_MINUTES).map(|_| Minute::default()).collect()),
        }
    }
}

impl Conflicts {
    /// A slot for a run of `observer`, if its window has room (one more for a notification
    /// that has waited long: `aged`); `None` holds the run back.
    pub(crate) fn admit<'a>(inner: &'a Inner, observer: &'a str, aged: bool) -> Option<Slot<'a>> {
        let mut windows = inner.conflicts.windows.lock().unwrap_or_else(PoisonError::into_inner);
        let w = match windows.get_mut(observer) {
            Some(w) => w,
            None => windows.entry(observer.to_owned()).or_insert(Window {
                limit: MAX_RUN_WINDOW,
                running: 0,
                held_back: false,
            }),
        };
        let room = (w.limit as u32).max(1) + u32::from(aged);
        if w.running >= room {
            w.held_back = true;
            return None;
        }
        w.running += 1;
        Some(Slot { inner, observer })
    }

    /// Adapts `observer`'s window to a run's end: wider after a commit, narrower after a loss.
    fn adapt(&self, observer: &str, outcome: RunEnd) {
        let mut windows = self.windows.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(w) = windows.get_mut(observer) {
            match outcome {
                RunEnd::Committed => w.limit = (w.limit + WINDOW_INCREASE / w.limit).min(MAX_RUN_WINDOW),
                // From the runs actually in flight (this one included), if fewer than the
                // window: a window far above what the workers run would take many losses to
                // come down.
                RunEnd::Lost => w.limit = (w.limit.min(f64::from(w.running)) * WINDOW_DECREASE).max(1.0),
                RunEnd::Failed | RunEnd::Skipped => {}
            }
        }
    }

    /// Counts a run of `observer` that ended with `outcome`.
    pub(crate) fn record(&self, observer: &str, outcome: RunEnd) {
        self.adapt(observer, outcome);
        let mut map = self.outcomes.lock().unwrap_or_else(PoisonError::into_inner);
        let o = match map.get_mut(observer) {
            Some(o) => o,
            None => map.entry(observer.to_owned()).or_default(),
        };
        let n = match outcome {
            RunEnd::Committed => &mut o.committed,
            RunEnd::Lost => &mut o.lost_to_conflict,
            RunEnd::Failed => &mut o.failed,
            RunEnd::Skipped => &mut o.skipped,
        };
        *n += 1;
    }

    /// Records a run of `observer` lost to a conflict on `cell`.
    pub(crate) fn lost(&self, observer: &str, cell: &CellRef) {
        self.record(observer, RunEnd::Lost);
        let minute = self.opened.elapsed().as_secs() / 60;
        let mut ring = self.minutes.lock().unwrap_or_else(PoisonError::into_inner);
        let slot = &mut ring[(minute % u64::from(HOT_ROWS_MINUTES)) as usize];
        if slot.minute != minute {
            *slot = Minute { minute, cells: HashMap::new() };
        }
        let full = slot.cells.len() >= HOT_CELLS_PER_MINUTE;
        let count = match slot.cells.get_mut(cell) {
            Some(c) => c,
            None if full => return,
            None => slot.cells.entry(cell.clone()).or_default(),
        };
        count.conflicts += 1;
        count.last_ms = now_ms();
        let named = count.observers.len();
        match count.observers.iter_mut().find(|(name, _)| name == observer) {
            Some((_, n)) => *n += 1,
            None if named < OBSERVERS_PER_CELL => count.observers.push((observer.to_owned(), 1)),
            None => {}
        }
    }

    fn hot_rows(&self, window: Duration, limit: usize) -> Vec<HotRow> {
        let now = self.opened.elapsed().as_secs() / 60;
        // The current minute and the whole minutes before it that the window reaches into.
        let minutes = window.as_secs().div_ceil(60).clamp(1, u64::from(HOT_ROWS_MINUTES));
        let mut sum: HashMap<&CellRef, HotCount> = HashMap::new();
        let ring = self.minutes.lock().unwrap_or_else(PoisonError::into_inner);
        for slot in ring.iter().filter(|s| s.minute + minutes > now && s.minute <= now) {
            for (cell, c) in &slot.cells {
                let total = sum.entry(cell).or_default();
                total.conflicts += c.conflicts;
                total.last_ms = total.last_ms.max(c.last_ms);
                for (name, n) in &c.observers {
                    match total.observers.iter_mut().find(|(o, _)| o == name) {
                        Some((_, m)) => *m += n,
                        None => total.observers.push((name.clone(), *n)),
                    }
                }
            }
        }
        let mut rows: Vec<HotRow> = sum
            .into_iter()
            .map(|(cell, mut c)| {
                c.observers.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
                HotRow { cell: cell.clone(), conflicts: c.conflicts, observers: c.observers, last_ms: c.last_ms }
            })
            .collect();
        // Most conflicts first; ties by the most recent, then by cell (a stable answer).
        rows.sort_by(|a, b| {
            b.conflicts.cmp(&a.conflicts).then_with(|| b.last_ms.cmp(&a.last_ms)).then_with(|| a.cell.cmp(&b.cell))
        });
        rows.truncate(limit);
        rows
    }
}

/// How long a notification waits before its observer runs again after its `losses`-th
/// conflict in a row (≥ 1), the first of them `since` ago: full jitter, a uniformly random
/// wait up to [`CONFLICT_BACKOFF`] doubled per loss and capped at [`CONFLICT_BACKOFF_MAX`], so
/// runs that lost together do not retry together; none once the first loss is
/// [`CONFLICT_AGING`] old.
pub(crate) fn conflict_backoff(losses: u32, since: Duration) -> Duration {
    if since >= CONFLICT_AGING {
        return Duration::ZERO;
    }
    let ceiling = CONFLICT_BACKOFF.saturating_mul(1u32 << losses.saturating_sub(1).min(16)).min(CONFLICT_BACKOFF_MAX);
    ceiling.mul_f64(rand::random::<f64>())
}

impl Store {
    /// What became of each observer's runs in this process (since the store opened): see
    /// [`RunOutcomes`]. Observers without a run here are absent.
    pub fn run_outcomes(&self) -> BTreeMap<String, RunOutcomes> {
        self.inner.conflicts.outcomes.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// The cells with the most observer runs lost to conflicts on them over the last `window`
    /// (in whole minutes, counting the current one; at most [`HOT_ROWS_MINUTES`]), most first,
    /// at most `limit`. This process's runs; empty when nothing conflicted.
    pub fn hot_rows(&self, window: Duration, limit: usize) -> Vec<HotRow> {
        self.inner.conflicts.hot_rows(window, limit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_under_its_ceiling_and_ends_with_age() {
        for losses in 1..40 {
            let ceiling = (CONFLICT_BACKOFF * 2u32.pow(losses.min(16) - 1)).min(CONFLICT_BACKOFF_MAX);
            for _ in 0..20 {
                assert!(conflict_backoff(losses, Duration::ZERO) <= ceiling, "loss {losses}");
            }
        }
        // Jitter: not every wait is the same.
        let waits: std::collections::HashSet<Duration> =
            (0..20).map(|_| conflict_backoff(8, Duration::from_millis(10))).collect();
        assert!(waits.len() > 1);
        assert_eq!(conflict_backoff(30, CONFLICT_AGING), Duration::ZERO);
    }

    #[test]
    fn an_observers_window_narrows_on_losses_and_widens_on_commits() {
        let store = Store::in_memory(Default::default()).unwrap();
        let inner = &store.inner;
        // Wide open at first: eight runs in flight.
        let slots: Vec<Slot<'_>> = (0..8).map(|_| Conflicts::admit(inner, "o", false).unwrap()).collect();
        // One loses with eight in flight: the window comes down from there (8 × 0.8).
        inner.conflicts.record("o", RunEnd::Lost);
        drop(slots);
        let held: Vec<Slot<'_>> = (0..6).map(|_| Conflicts::admit(inner, "o", false).unwrap()).collect();
        assert!(Conflicts::admit(inner, "o", false).is_none(), "six of 6.4");
        // A notification that has waited long gets one slot beyond the window.
        let aged = Conflicts::admit(inner, "o", true).unwrap();
        assert!(Conflicts::admit(inner, "o", true).is_none());
        drop((held, aged));
        // Losses bring it down to one run at a time, never below.
        for _ in 0..20 {
            let _slot = Conflicts::admit(inner, "o", false).unwrap();
            inner.conflicts.record("o", RunEnd::Lost);
        }
        let one = Conflicts::admit(inner, "o", false).unwrap();
        assert!(Conflicts::admit(inner, "o", false).is_none());
        drop(one);
        // Commits widen it again: from 1 to 2 after three (1.5, 1.83, 2.11).
        for _ in 0..3 {
            let _slot = Conflicts::admit(inner, "o", false).unwrap();
            inner.conflicts.record("o", RunEnd::Committed);
        }
        let two: Vec<Slot<'_>> = (0..2).map(|_| Conflicts::admit(inner, "o", false).unwrap()).collect();
        assert!(Conflicts::admit(inner, "o", false).is_none());
        // Other observers have windows of their own.
        assert!(Conflicts::admit(inner, "other", false).is_some());
        drop(two);
    }

    #[test]
    fn hot_rows_rank_cells_by_conflicts_and_cap_the_list() {
        let c = Conflicts::default();
        let hot = CellRef::new("t", "hot", "c:n");
        let warm = CellRef::new("t", "warm", "c:n");
        for _ in 0..5 {
            c.lost("count", &hot);
        }
        c.lost("other", &hot);
        c.lost("count", &warm);
        let rows = c.hot_rows(Duration::from_secs(300), 10);
        assert_eq!(rows.len(), 2);
        assert_eq!((rows[0].cell.clone(), rows[0].conflicts), (hot, 6));
        assert_eq!(rows[0].observers, vec![("count".to_owned(), 5), ("other".to_owned(), 1)]);
        assert_eq!((rows[1].cell.clone(), rows[1].conflicts), (warm, 1));
        assert_eq!(c.hot_rows(Duration::from_secs(60), 1).len(), 1);
        assert_eq!(c.outcomes.lock().unwrap()["count"].lost_to_conflict, 6);
    }

    #[test]
    fn old_minutes_leave_the_window() {
        // A store open for three minutes, with a conflict in its first minute.
        let Some(opened) = Instant::now().checked_sub(Duration::from_secs(180)) else { return };
        let c = Conflicts { opened, ..Conflicts::default() };
        let cell = CellRef::new("t", "r", "c");
        c.minutes.lock().unwrap()[0] = Minute {
            minute: 0,
            cells: HashMap::from([(cell.clone(), HotCount { conflicts: 2, observers: vec![], last_ms: 1 })]),
        };
        assert_eq!(c.hot_rows(Duration::from_secs(60), 10), vec![]);
        assert_eq!(c.hot_rows(Duration::from_secs(240), 10)[0].conflicts, 2);
        // A conflict now lands in minute 3, and a slot reused ten minutes on starts empty.
        c.lost("o", &cell);
        assert_eq!(c.hot_rows(Duration::from_secs(60), 10)[0].conflicts, 1);
        assert_eq!(c.hot_rows(Duration::from_secs(600), 10)[0].conflicts, 3);
    }
}
