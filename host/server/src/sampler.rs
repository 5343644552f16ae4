//! Throughput: a ring of periodic samples of the store's counters (the host takes one a
//! second), and the rates over the last [`WINDOW`].

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

    /// Rates between the oldest and the newest sample (zero until there are two).
    pub fn throughput(&self) -> Throughput {
        let Ok(ring) = self.ring.lock() else { return Throughput::default() };
        let (Some((t0, a)), Some((t1, b))) = (ring.front(), ring.back()) else { return Throughput::default() };
        let secs = t1.duration_since(*t0).as_secs_f64();
        if secs <= 0.0 {
            return Throughput::default();
        }
        let rate = |x: u64, y: u64| y.saturating_sub(x) as f64 / secs;
        Throughput {
            window_secs: secs,
            observer_runs_per_sec: rate(a.observer_runs, b.observer_runs),
            commits_per_sec: rate(a.commits, b.commits),
            conflicts_per_sec: rate(a.conflicts, b.conflicts),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throughput_is_the_rate_over_the_window() {
        let s = Sampler::new();
        let t0 = Instant::now();
        assert_eq!(s.throughput().commits_per_sec, 0.0);
        for i in 0..30u64 {
            let mut m = Metrics::default();
            (m.commits, m.conflicts, m.observer_runs) = (10 * i, i, 2 * i);
            s.sample_at(t0 + Duration::from_secs(i), m);
        }
        let t = s.throughput();
        assert!((t.window_secs - 10.0).abs() < 1e-9, "{t:?}");
        assert!((t.commits_per_sec - 10.0).abs() < 1e-9);
        assert!((t.conflicts_per_sec - 1.0).abs() < 1e-9);
        assert!((t.observer_runs_per_sec - 2.0).abs() < 1e-9);
    }
}
