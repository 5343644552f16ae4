//! The oracle's clock: when, in this process's time, a timestamp was handed out.
//!
//! Timestamps are logical (a counter, see `oracle.rs`), so a commit timestamp alone does not
//! say when the commit happened. The oracle samples its own output instead: every timestamp it
//! hands out at least [`FINE_EVERY`] after the previous sample is recorded with the time it was
//! handed out, in a ring of [`FINE_SAMPLES`] (about a minute under constant load), and one a
//! second in a ring of [`COARSE_SAMPLES`] (an hour). [`Clock::when`] turns a timestamp back into
//! a time by interpolating between the two samples around it. Both bounds hold: a timestamp
//! above sample `s` was issued after `s` was, and one below sample `s'` before `s'` was.
//!
//! How close that is: for timestamps this process handed out, the sample before one was taken
//! less than [`FINE_EVERY`] (or a second, in the coarse ring) before it, since a longer gap
//! would have made it a sample itself. A timestamp another host got from the shared oracle
//! falls between two of this process's samples; the host takes one every second however idle
//! it is, so its estimate is within about a second, and within [`FINE_EVERY`] while this host
//! is busy too. A timestamp older than every sample (from before this process started, or
//! more than an hour old) has no estimate.
//!
//! The cost on the oracle's path is one clock read and one atomic load per timestamp; the lock
//! is taken at most once per [`FINE_EVERY`].

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::timestamp::Timestamp;

/// Milliseconds since the Unix epoch: the wall clock of worker leases, locks' TTLs, pins and
/// dead letters (the oracle's timestamps are logical; see the module docs).
pub(crate) fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// The fine ring takes a sample at most this often.
pub(crate) const FINE_EVERY: Duration = Duration::from_millis(1);
/// Samples in the fine ring (65 s at one a millisecond).
const FINE_SAMPLES: usize = 1 << 16;
/// The coarse ring takes a sample at most this often.
const COARSE_EVERY: Duration = Duration::from_secs(1);
/// Samples in the coarse ring (an hour at one a second).
const COARSE_SAMPLES: usize = 3600;

/// Samples of (timestamp, nanoseconds since the clock's base), in increasing order of both.
struct Ring {
    every: u64,
    capacity: usize,
    samples: VecDeque<(u64, u64)>,
}

impl Ring {
    fn new(every: Duration, capacity: usize) -> Ring {
        Ring { every: every.as_nanos() as u64, capacity, samples: VecDeque::new() }
    }

    fn offer(&mut self, ts: u64, at: u64) {
        // Callers race between taking a timestamp and offering it: keep the samples ordered
        // (a skipped one only widens the interval around it).
        if let Some(&(last_ts, last_at)) = self.samples.back()
            && (ts <= last_ts || at < last_at.saturating_add(self.every))
        {
            return;
        }
        if self.samples.len() == self.capacity {
            self.samples.pop_front();
        }
        self.samples.push_back((ts, at));
    }

    /// Nanoseconds since the base when `ts` was handed out, interpolated; none if `ts` is older
    /// than every sample.
    fn when(&self, ts: u64) -> Option<u64> {
        let i = self.samples.partition_point(|(s, _)| *s <= ts);
        let (lo_ts, lo_at) = *self.samples.get(i.checked_sub(1)?)?;
        Some(match self.samples.get(i) {
            // Newer than the newest sample: issued after it, and (if this process issued it)
            // within one interval of it.
            None => lo_at,
            Some(&(hi_ts, hi_at)) => {
                let span = (hi_at - lo_at) as u128 * u128::from(ts - lo_ts) / u128::from(hi_ts - lo_ts);
                lo_at + span as u64
            }
        })
    }
}

/// See the module docs.
pub(crate) struct Clock {
    base: Instant,
    /// When the last sample was offered (ns since `base`): most timestamps need only read this.
    last: AtomicU64,
    rings: Mutex<(Ring, Ring)>,
}

impl Default for Clock {
    fn default() -> Clock {
        Clock {
            base: Instant::now(),
            last: AtomicU64::new(0),
            rings: Mutex::new((Ring::new(FINE_EVERY, FINE_SAMPLES), Ring::new(COARSE_EVERY, COARSE_SAMPLES))),
        }
    }
}

impl Clock {
    /// Records that `ts` was handed out now (if a sample is due).
    pub(crate) fn issued(&self, ts: Timestamp) {
        self.issued_at(ts, Instant::now());
    }

    fn issued_at(&self, ts: Timestamp, now: Instant) {
        let at = now.saturating_duration_since(self.base).as_nanos() as u64;
        let last = self.last.load(Ordering::Relaxed);
        if last != 0 && at < last.saturating_add(FINE_EVERY.as_nanos() as u64) {
            return;
        }
        self.last.store(at.max(1), Ordering::Relaxed);
        // Sampling is best effort: a poisoned lock only stops it.
        let Ok(mut rings) = self.rings.lock() else { return };
        rings.0.offer(ts.raw(), at);
        rings.1.offer(ts.raw(), at);
    }

    /// When `ts` was handed out, estimated (see the module docs); none if it is older than the
    /// clock's samples.
    pub(crate) fn when(&self, ts: Timestamp) -> Option<Instant> {
        let rings = self.rings.lock().ok()?;
        let at = rings.0.when(ts.raw()).or_else(|| rings.1.when(ts.raw()))?;
        Some(self.base + Duration::from_nanos(at))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(raw: u64) -> Timestamp {
        Timestamp::from_raw(raw)
    }

    #[test]
    fn a_timestamp_is_placed_between_the_samples_around_it() {
        let clock = Clock::default();
        let base = clock.base;
        let ms = |n: u64| base + Duration::from_millis(n);
        // Timestamps 100 and 200 handed out 10 ms apart; 150 (another host's) lies between.
        clock.issued_at(t(100), ms(10));
        clock.issued_at(t(200), ms(20));
        assert_eq!(clock.when(t(150)), Some(ms(15)));
        assert_eq!(clock.when(t(100)), Some(ms(10)));
        assert_eq!(clock.when(t(200)), Some(ms(20)));
        // Newer than every sample: the newest sample's time (a lower bound).
        assert_eq!(clock.when(t(250)), Some(ms(20)));
        // Older than every sample: unknown.
        assert_eq!(clock.when(t(99)), None);
    }

    #[test]
    fn samples_are_taken_at_most_once_an_interval_and_stay_ordered() {
        let clock = Clock::default();
        let base = clock.base;
        clock.issued_at(t(10), base + Duration::from_millis(5));
        // Less than FINE_EVERY later: not a sample.
        clock.issued_at(t(11), base + Duration::from_millis(5) + Duration::from_micros(500));
        // A racing caller offers an older timestamp later: skipped, the ring stays ordered.
        clock.issued_at(t(9), base + Duration::from_millis(7));
        clock.issued_at(t(20), base + Duration::from_millis(9));
        let rings = clock.rings.lock().unwrap();
        let fine: Vec<u64> = rings.0.samples.iter().map(|(ts, _)| *ts).collect();
        assert_eq!(fine, [10, 20]);
        // The coarse ring keeps one a second.
        let coarse: Vec<u64> = rings.1.samples.iter().map(|(ts, _)| *ts).collect();
        assert_eq!(coarse, [10]);
    }

    #[test]
    fn the_coarse_ring_answers_past_the_fine_one() {
        let clock = Clock::default();
        let base = clock.base;
        // Twenty samples a second apart, then more 1 ms samples than the fine ring holds.
        for i in 0..20u64 {
            clock.issued_at(t(1000 + i), base + Duration::from_secs(1 + i));
        }
        let start = 2000;
        for i in 0..(FINE_SAMPLES as u64 + 10) {
            clock.issued_at(t(start + i), base + Duration::from_secs(30) + Duration::from_millis(i));
        }
        // Timestamp 1005 fell out of the fine ring; the coarse ring still places it.
        assert_eq!(clock.when(t(1005)), Some(base + Duration::from_secs(6)));
        assert!(clock.when(t(start + 100)).is_some());
    }
}
