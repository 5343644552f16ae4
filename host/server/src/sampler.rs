//! Throughput: a ring of periodic samples of the store's counters (the host takes one a
//! second), and the rates from about [`WINDOW`] ago up to now (the counters read at the
//! request: a rate does not trail the last sample).

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use percolator_api::Throughput;
use percolator_store::Metrics;

/// Rates are computed over this window.
pub const WINDOW: Duration = Duration::from_secs(10);

/// A ring of `(when, counters)` samples covering the last [`WINDOW`] (the host takes one a
/// second).
#[derive(Default)]
pub struct Sampler {
    ring: Mutex<VecDeque<(Instant, Metrics)>>,
}

impl Sampler {
    /// An empty ring.
    pub fn new() -> Sampler {
        Sampler::default()
    }

    /// Records a sample taken now.
    pub fn sample(&self, m: Metrics) {
        self.sample_at(Instant::now(), m);
    }

    fn sample_at(&self, at: Instant, m: Metrics) {
        let Ok(mut ring) = self.ring.lock() else { return };
        ring.push_back((at, m));
        // Keep the newest sample at least WINDOW older than `at` (the window's start).
        while ring.len() > 2 && ring.get(1).is_some_and(|(t, _)| at.duration_since(*t) >= WINDOW) {
            ring.pop_front();
        }
    }

    /// Rates from the oldest sample to `now`, the counters read now (zero before the first
    /// sample).
    pub fn throughput_now(&self, now: Metrics) -> Throughput {
        self.throughput_at(Instant::now(), &now)
    }

    fn throughput_at(&self, t1: Instant, b: &Metrics) -> Throughput {
        let Ok(ring) = self.ring.lock() else { return Throughput::default() };
        // The window's start: the newest sample at least WINDOW before `t1`, else the oldest.
        let start = ring.iter().rev().find(|(t, _)| t1.saturating_duration_since(*t) >= WINDOW).or(ring.front());
        let Some((t0, a)) = start else { return Throughput::default() };
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
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(i: u64) -> Metrics {
        let mut m = Metrics::default();
        (m.commits, m.conflicts, m.observer_runs, m.oracle_timestamps) = (10 * i, i, 2 * i, 30 * i);
        m
    }

    #[test]
    fn throughput_is_the_rate_over_the_window_up_to_now() {
        let s = Sampler::new();
        let t0 = Instant::now();
        assert_eq!(s.throughput_at(t0, &counts(0)).commits_per_sec, 0.0);
        for i in 0..30u64 {
            s.sample_at(t0 + Duration::from_secs(i), counts(i));
        }
        let t = s.throughput_at(t0 + Duration::from_secs(29), &counts(29));
        assert!((t.window_secs - 10.0).abs() < 1e-9, "{t:?}");
        assert!((t.commits_per_sec - 10.0).abs() < 1e-9);
        assert!((t.conflicts_per_sec - 1.0).abs() < 1e-9);
        assert!((t.observer_runs_per_sec - 2.0).abs() < 1e-9);
        assert!((t.timestamps_per_sec - 30.0).abs() < 1e-9);
        // Half a second after the last sample, with 5 more commits since: they count now, not
        // at the next sample.
        let mut now = counts(29);
        now.commits += 5;
        let t = s.throughput_at(t0 + Duration::from_millis(29_500), &now);
        assert!((t.window_secs - 10.5).abs() < 1e-9, "{t:?}");
        assert!((t.commits_per_sec - 105.0 / 10.5).abs() < 1e-9, "{t:?}");
    }
}
