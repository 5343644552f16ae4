//! The host's sample ring: the store's counters and the backlog, sampled once a second (by
//! `serve`) and kept for [`HISTORY`]. From it: the rates from about [`WINDOW`] ago up to now
//! (the counters read at the request: a rate does not trail the last sample), and the samples
//! themselves (`GET /v1/samples`), which the dashboard's charts start from when a tab opens.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use percolator_api::{CounterSample, SamplesReport, Throughput};
use percolator_store::Metrics;

/// Rates are computed over this window.
pub const WINDOW: Duration = Duration::from_secs(10);

/// Samples are kept this long (the dashboard's charts show as much).
pub const HISTORY: Duration = Duration::from_secs(5 * 60);

/// The backlog when a sample was taken: pending notifications counted up to a cap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pending {
    /// Counted.
    pub count: u64,
    /// True if counting stopped at the cap.
    pub capped: bool,
}

/// One sample.
struct Sample {
    at: Instant,
    /// The same instant on the wall clock (what clients are told).
    wall: SystemTime,
    metrics: Metrics,
    /// None if not counted for this sample, or counting failed.
    pending: Option<Pending>,
}

/// A ring of samples covering the last [`HISTORY`] (the host takes one a second).
#[derive(Default)]
pub struct Sampler {
    ring: Mutex<VecDeque<Sample>>,
}

impl Sampler {
    /// An empty ring.
    pub fn new() -> Sampler {
        Sampler::default()
    }

    /// Records a sample taken now.
    pub fn sample(&self, m: Metrics, pending: Option<Pending>) {
        self.sample_at(Instant::now(), SystemTime::now(), m, pending);
    }

    fn sample_at(&self, at: Instant, wall: SystemTime, metrics: Metrics, pending: Option<Pending>) {
        let Ok(mut ring) = self.ring.lock() else { return };
        ring.push_back(Sample { at, wall, metrics, pending });
        // Keep the newest sample at least HISTORY older than `at` (the history's start).
        while ring.len() > 2 && ring.get(1).is_some_and(|s| at.duration_since(s.at) >= HISTORY) {
            ring.pop_front();
        }
    }

    /// Rates from about [`WINDOW`] ago to now, the counters read now (zero before the first
    /// sample).
    pub fn throughput_now(&self, now: Metrics) -> Throughput {
        self.throughput_at(Instant::now(), &now)
    }

    fn throughput_at(&self, t1: Instant, b: &Metrics) -> Throughput {
        let Ok(ring) = self.ring.lock() else { return Throughput::default() };
        // The window's start: the newest sample at least WINDOW before `t1`, else the oldest.
        let start = ring.iter().rev().find(|s| t1.saturating_duration_since(s.at) >= WINDOW).or(ring.front());
        let Some(Sample { at: t0, metrics: a, .. }) = start else { return Throughput::default() };
        let secs = t1.saturating_duration_since(*t0).as_secs_f64();
        if secs <= 0.0 {
            return Throughput::default();
        }
        let rate = |x: u64, y: u64| y.saturating_sub(x) as f64 / secs;
        Throughput {
            window_secs: secs,
            observer_runs_per_sec: rate(a.observer_runs, b.observer_runs),
            commits_per_sec: rate(a.commits, b.commits),
            conflicts_per_sec: rate(a.conflicts, b.conflicts),
            timestamps_per_sec: rate(a.oracle_timestamps, b.oracle_timestamps),
            store_failures_per_sec: rate(a.observer_store_failures, b.observer_store_failures),
        }
    }

    /// The samples of the last [`HISTORY`], oldest first (`GET /v1/samples`).
    pub fn report(&self) -> SamplesReport {
        let unix_ms = |t: SystemTime| t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
        let now_unix_ms = unix_ms(SystemTime::now());
        let Ok(ring) = self.ring.lock() else { return SamplesReport { now_unix_ms, samples: Vec::new() } };
        let samples = ring
            .iter()
            .map(|s| CounterSample {
                unix_ms: unix_ms(s.wall),
                pending_notifications: s.pending.map(|p| p.count),
                pending_capped: s.pending.is_some_and(|p| p.capped),
                commits: s.metrics.commits,
                observer_runs: s.metrics.observer_runs,
                conflicts: s.metrics.conflicts,
                oracle_timestamps: s.metrics.oracle_timestamps,
            })
            .collect();
        SamplesReport { now_unix_ms, samples }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(i: u64) -> Metrics {
        let mut m = Metrics::default();
        (m.commits, m.conflicts, m.observer_runs, m.oracle_timestamps) = (10 * i, i, 2 * i, 30 * i);
        m.observer_store_failures = 3 * i;
        m
    }

    #[test]
    fn throughput_is_the_rate_over_the_window_up_to_now() {
        let s = Sampler::new();
        let t0 = Instant::now();
        assert_eq!(s.throughput_at(t0, &counts(0)).commits_per_sec, 0.0);
        for i in 0..30u64 {
            s.sample_at(t0 + Duration::from_secs(i), SystemTime::now(), counts(i), None);
        }
        let t = s.throughput_at(t0 + Duration::from_secs(29), &counts(29));
        assert!((t.window_secs - 10.0).abs() < 1e-9, "{t:?}");
        assert!((t.commits_per_sec - 10.0).abs() < 1e-9);
        assert!((t.conflicts_per_sec - 1.0).abs() < 1e-9);
        assert!((t.observer_runs_per_sec - 2.0).abs() < 1e-9);
        assert!((t.timestamps_per_sec - 30.0).abs() < 1e-9);
        assert!((t.store_failures_per_sec - 3.0).abs() < 1e-9);
        // Half a second after the last sample, with 5 more commits since: they count now, not
        // at the next sample.
        let mut now = counts(29);
        now.commits += 5;
        let t = s.throughput_at(t0 + Duration::from_millis(29_500), &now);
        assert!((t.window_secs - 10.5).abs() < 1e-9, "{t:?}");
        assert!((t.commits_per_sec - 105.0 / 10.5).abs() < 1e-9, "{t:?}");
    }

    #[test]
    fn the_ring_keeps_five_minutes_of_samples_with_the_backlog() {
        let s = Sampler::new();
        let (t0, w0) = (Instant::now(), UNIX_EPOCH + Duration::from_secs(1_800_000_000));
        assert!(s.report().samples.is_empty());
        // Ten minutes of samples, one a second; the backlog rises by 3 a second, and one count
        // failed.
        for i in 0..600u64 {
            let pending = (i != 590).then_some(Pending { count: 3 * i, capped: i >= 595 });
            s.sample_at(t0 + Duration::from_secs(i), w0 + Duration::from_secs(i), counts(i), pending);
        }
        let r = s.report();
        // The last 5 minutes, and the sample at their start.
        assert_eq!(r.samples.len(), 301, "{} samples", r.samples.len());
        let first = &r.samples[0];
        assert_eq!(first.unix_ms, 1_800_000_299_000);
        assert_eq!(
            (first.commits, first.observer_runs, first.conflicts, first.oracle_timestamps),
            (2990, 598, 299, 8970)
        );
        assert_eq!((first.pending_notifications, first.pending_capped), (Some(897), false));
        let failed = &r.samples[291];
        assert_eq!((failed.unix_ms, failed.pending_notifications), (1_800_000_590_000, None));
        let last = r.samples.last().unwrap();
        assert_eq!(
            (last.unix_ms, last.pending_notifications, last.pending_capped),
            (1_800_000_599_000, Some(1797), true)
        );
        assert!(r.samples.windows(2).all(|w| w[0].unix_ms < w[1].unix_ms), "oldest first");
        assert!(r.now_unix_ms > 0);
        // The rates still come from the last 10 s.
        let t = s.throughput_at(t0 + Duration::from_secs(599), &counts(599));
        assert!((t.window_secs - 10.0).abs() < 1e-9 && (t.commits_per_sec - 10.0).abs() < 1e-9, "{t:?}");
    }
}
