//! Freshness: how long after a change committed the observer run that consumed it committed,
//! per observer, as a histogram.
//!
//! A committed observer run knows the timestamp of the change it ran on: for a weak observer
//! the timestamp of the notification, for a strong one the later of that and the commit
//! timestamp of the newest write its snapshot saw (a notification made after the write — a
//! rerun, a retried dead letter — counts from itself: the run answers it, not the old write). The oracle's [clock](crate::clock) turns that into the time
//! the timestamp was handed out, and the run's latency is from then to the run's commit. The
//! histograms are this process's (they start empty when the store opens); a run whose change
//! is older than the clock's samples counts as `untimed`.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::store::{Inner, Store};
use crate::timestamp::Timestamp;

/// Upper bounds of the freshness histogram's buckets (a 1-2.5-5 series from 1 ms to 10 min; a
/// last, unbounded bucket holds the later runs). Fixed, so that every observer's buckets line
/// up in a Prometheus histogram.
pub const FRESHNESS_BUCKETS: [Duration; 18] = [
    Duration::from_millis(1),
    Duration::from_micros(2_500),
    Duration::from_millis(5),
    Duration::from_millis(10),
    Duration::from_millis(25),
    Duration::from_millis(50),
    Duration::from_millis(100),
    Duration::from_millis(250),
    Duration::from_millis(500),
    Duration::from_secs(1),
    Duration::from_millis(2_500),
    Duration::from_secs(5),
    Duration::from_secs(10),
    Duration::from_secs(25),
    Duration::from_secs(60),
    Duration::from_secs(150),
    Duration::from_secs(300),
    Duration::from_secs(600),
];

/// One observer's freshness histogram: [`Store::freshness`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct FreshnessCounts {
    /// Committed runs per bucket of [`FRESHNESS_BUCKETS`] (not cumulative); the last bucket
    /// holds the runs later than the last bound.
    pub buckets: [u64; FRESHNESS_BUCKETS.len() + 1],
    /// The sum of the latencies the buckets hold.
    pub sum: Duration,
    /// Committed runs whose change is older than the oracle clock's samples (committed before
    /// this process started, or more than an hour before the run): not in the buckets.
    pub untimed: u64,
}

impl FreshnessCounts {
    /// Runs in the buckets.
    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    fn record(&mut self, latency: Duration) {
        let i = FRESHNESS_BUCKETS.iter().position(|b| latency <= *b).unwrap_or(FRESHNESS_BUCKETS.len());
        self.buckets[i] += 1;
        self.sum = self.sum.saturating_add(latency);
    }
}

/// The `q`-quantile (0 < q ≤ 1) of a histogram with upper bounds `bounds` and per-bucket (not
/// cumulative) counts `buckets` (one more than `bounds`: the last is unbounded), computed as
/// Prometheus's `histogram_quantile` does from the same buckets: linear interpolation inside
/// the bucket that holds the rank, from 0 in the first bucket; a rank in the unbounded bucket
/// answers the last bound. None for an empty histogram.
pub fn histogram_quantile(bounds: &[Duration], buckets: &[u64], q: f64) -> Option<Duration> {
    let total: u64 = buckets.iter().sum();
    if total == 0 {
        return None;
    }
    // Less a little: q × total is not exact in floating point (0.99 × 100 > 99).
    let rank = q.clamp(0.0, 1.0) * total as f64 - 1e-9;
    let mut below = 0u64;
    for (i, n) in buckets.iter().enumerate() {
        let upto = below + n;
        if upto as f64 >= rank && *n > 0 {
            let Some(end) = bounds.get(i) else { return bounds.last().copied() };
            let start = i.checked_sub(1).and_then(|j| bounds.get(j)).copied().unwrap_or(Duration::ZERO);
            let within = ((rank + 1e-9 - below as f64) / *n as f64).clamp(0.0, 1.0);
            return Some(start + (*end - start).mul_f64(within));
        }
        below = upto;
    }
    bounds.last().copied()
}

/// Every observer's histogram in this process.
#[derive(Default)]
pub(crate) struct Freshness(Mutex<BTreeMap<String, FreshnessCounts>>);

impl Freshness {
    /// Records a committed run of `observer` on the change at `changed`, committed at `now`.
    pub(crate) fn record(&self, inner: &Inner, observer: &str, changed: Timestamp, now: Instant) {
        let when = inner.oracle.clock().when(changed);
        // One insertion per call: a poisoned map is still consistent.
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let counts = match map.get_mut(observer) {
            Some(c) => c,
            None => map.entry(observer.to_owned()).or_default(),
        };
        match when {
            Some(t) => counts.record(now.saturating_duration_since(t)),
            None => counts.untimed += 1,
        }
    }
}

impl Store {
    /// Each observer's freshness histogram in this process: how long after the change it ran on
    /// committed each of its committed runs committed (see [`FreshnessCounts`]). Observers
    /// without a committed run here are absent.
    pub fn freshness(&self) -> BTreeMap<String, FreshnessCounts> {
        self.inner.freshness.0.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Takes a timestamp from the oracle, so that its clock has a sample now even while this
    /// store takes none (a host calls it every second): then the commit time of another
    /// host's change is known to about that interval.
    pub fn sample_clock(&self) -> crate::Result<()> {
        self.inner.oracle.next().map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// Within a microsecond (the interpolation is in floating point).
    fn about(got: Option<Duration>, want: Duration) -> bool {
        got.is_some_and(|g| g.abs_diff(want) < Duration::from_micros(1))
    }

    #[test]
    fn quantiles_interpolate_inside_the_bucket_like_prometheus() {
        let bounds = [10 * MS, 20 * MS, 40 * MS];
        assert_eq!(histogram_quantile(&bounds, &[0, 0, 0, 0], 0.5), None);
        // 4 runs ≤ 10 ms, 4 in (10, 20], 2 in (20, 40].
        let buckets = [4, 4, 2, 0];
        // Rank 5 of 10: the first of the second bucket's 4, a quarter into (10, 20].
        assert!(about(histogram_quantile(&bounds, &buckets, 0.5), 12_500 * Duration::from_micros(1)));
        // Rank 2: half-way through the first bucket, from 0.
        assert!(about(histogram_quantile(&bounds, &buckets, 0.2), 5 * MS));
        // Rank 9.9: 95 % into (20, 40].
        assert!(about(histogram_quantile(&bounds, &buckets, 0.99), 39 * MS));
        // A rank in the unbounded bucket answers the last bound.
        assert_eq!(histogram_quantile(&bounds, &[0, 0, 1, 9], 0.5), Some(40 * MS));
        // Empty buckets before the rank are skipped, not interpolated into.
        assert!(about(histogram_quantile(&bounds, &[0, 0, 2, 0], 0.5), 30 * MS));
    }

    #[test]
    fn a_committed_run_records_the_time_since_the_change_committed() {
        use crate::{NotifyKind, ObserveError, Observer, ObserverSpec, Transaction};
        struct Slow;
        impl Observer for Slow {
            fn observe(&self, _: &mut Transaction, _: &crate::Notification) -> Result<(), ObserveError> {
                std::thread::sleep(Duration::from_millis(30));
                Ok(())
            }
        }
        let store = Store::in_memory(Default::default()).unwrap();
        let spec = |name: &str, kind| ObserverSpec {
            name: name.into(),
            table: "t".into(),
            column: if kind == NotifyKind::Strong { "c:x".into() } else { "c:w".into() },
            kind,
            max_attempts: 1,
        };
        store.register_observer(spec("strong", NotifyKind::Strong), std::sync::Arc::new(Slow)).unwrap();
        store.register_observer(spec("weak", NotifyKind::Weak), std::sync::Arc::new(Slow)).unwrap();
        // The oracle samples a timestamp at most once per `FINE_EVERY`, and a timestamp between
        // two samples is placed by interpolation, which may put it before `before`. After this
        // wait (one interval would do; two leave a margin) the transaction's start timestamp
        // is a sample taken after `before` — nothing else takes timestamps on this store here:
        // no scanner, no GC thread — and the commit timestamp, above it, is placed no earlier.
        std::thread::sleep(2 * crate::clock::FINE_EVERY);
        let before = Instant::now();
        store
            .run(|t| {
                t.set("t", "r", "c:x", "v")?;
                t.notify_weak("t", "r", "c:w")
            })
            .unwrap();
        for e in store.pending_notifications(10).unwrap() {
            store.process_notification(&e).unwrap();
        }
        let waited = before.elapsed();
        let f = store.freshness();
        for name in ["strong", "weak"] {
            let c = f[name];
            assert_eq!((c.count(), c.untimed), (1, 0), "{name}: {c:?}");
            // At least the run's 30 ms, at most the time since before the commit.
            assert!(c.sum >= Duration::from_millis(30) && c.sum <= waited, "{name}: {:?} of {waited:?}", c.sum);
        }
    }

    #[test]
    fn a_run_on_a_later_notification_counts_from_the_notification() {
        use crate::{NotifyKind, ObserveError, Observer, ObserverSpec, Transaction};
        struct Nothing;
        impl Observer for Nothing {
            fn observe(&self, _: &mut Transaction, _: &crate::Notification) -> Result<(), ObserveError> {
                Ok(())
            }
        }
        let store = Store::in_memory(Default::default()).unwrap();
        let spec = ObserverSpec {
            name: "strong".into(),
            table: "t".into(),
            column: "c:x".into(),
            kind: NotifyKind::Strong,
            max_attempts: 1,
        };
        store.register_observer(spec, std::sync::Arc::new(Nothing)).unwrap();
        let process = || {
            for e in store.pending_notifications(10).unwrap() {
                store.process_notification(&e).unwrap();
            }
        };
        store.run(|t| t.set("t", "r", "c:x", "v")).unwrap();
        process();
        let first = store.freshness()["strong"].sum;
        // The write is old by the time the rerun asks for another run on it.
        std::thread::sleep(Duration::from_millis(300));
        let before = Instant::now();
        assert_eq!(store.rerun_existing("t", "c:x", b"", None).unwrap(), 1);
        process();
        let waited = before.elapsed();
        let c = store.freshness()["strong"];
        assert_eq!((c.count(), c.untimed), (2, 0), "{c:?}");
        let rerun = c.sum - first;
        assert!(
            rerun <= waited,
            "the rerun's run counts from the rerun ({rerun:?}, {waited:?} since it), not from the write"
        );
    }

    #[test]
    fn latencies_fall_into_their_buckets() {
        let mut c = FreshnessCounts::default();
        c.record(MS);
        c.record(3 * MS);
        c.record(Duration::from_secs(3600));
        assert_eq!(c.buckets[0], 1, "≤ 1 ms");
        assert_eq!(c.buckets[2], 1, "≤ 5 ms");
        assert_eq!(c.buckets[FRESHNESS_BUCKETS.len()], 1, "over 10 min");
        assert_eq!(c.count(), 3);
        assert_eq!(c.sum, Duration::from_secs(3600) + 4 * MS);
    }
}
