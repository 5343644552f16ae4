//! Trimming the change log (`Store::trim_changes`): a change stays while a subscription (a
//! sink) has not passed it, and at least `[[changes]] keep_s` for readers without one. The
//! oracle is sampled each time, so "the timestamp of `keep` ago" is known without a clock
//! in the store; after a restart the first trim waits until `keep` has passed again.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use percolator_store::{Store, Timestamp};

/// Samples of `(when, a fresh timestamp then)`, oldest first.
#[derive(Default)]
pub struct Trimmer {
    samples: VecDeque<(Instant, Timestamp)>,
}

impl Trimmer {
    /// Samples the oracle and trims the change log to the newest sample at least `keep` old
    /// (and never past a subscription's position: `Store::trim_changes` sees to that).
    /// Returns how many log rows it removed.
    pub fn tick(&mut self, store: &Store, keep: Duration) -> percolator_store::Result<u64> {
        let now = Instant::now();
        self.samples.push_back((now, store.oracle().next()?));
        let mut upto = None;
        while let Some(&(at, ts)) = self.samples.front() {
            if now.duration_since(at) < keep {
                break;
            }
            upto = Some(ts);
            self.samples.pop_front();
        }
        // Keep the last sample that was old enough: the next tick may use it again.
        if let Some(ts) = upto {
            self.samples.push_front((now.checked_sub(keep).unwrap_or(now), ts));
            if store.change_log().is_empty() && store.subscriptions()?.is_empty() {
                return Ok(0);
            }
            return store.trim_changes(ts);
        }
        Ok(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use percolator_store::{ChangeToken, StoreConfig};

    #[test]
    fn trims_what_is_older_than_keep_and_only_that() {
        let store = Store::in_memory(StoreConfig::default()).unwrap();
        store.set_change_log([("t".to_owned(), "c:v".to_owned())].into_iter().collect()).unwrap();
        store.run(|t| t.set("t", "a", "c:v", b"1".to_vec())).unwrap();
        let mut trimmer = Trimmer::default();
        assert_eq!(trimmer.tick(&store, Duration::from_millis(200)).unwrap(), 0, "nothing is old enough yet");
        store.run(|t| t.set("t", "b", "c:v", b"2".to_vec())).unwrap();
        std::thread::sleep(Duration::from_millis(250));
        // The first sample is 250 ms old now: the change before it goes, the one after stays.
        assert_eq!(trimmer.tick(&store, Duration::from_millis(200)).unwrap(), 1);
        let page = store.changes("t", None, &ChangeToken::origin(), 10).unwrap();
        assert_eq!(page.changes.len(), 1);
        assert_eq!(page.changes[0].cell.row, b"b");
    }
}
