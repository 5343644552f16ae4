//! `counter`: counts its own committed runs, for exactly-once tests of the host.
//!
//! Bind it to any column. On each notification it adds 1 to `derived:count` in the notified row
//! (a `u64`, 8 bytes big-endian; absent counts as 0). The read and the write are in the run's
//! transaction, so two racing runs conflict and the count equals the number of runs that
//! committed. Reads and writes: `derived:count`.

use percolator_guest::{Notification, Observer, Result, Txn};

/// The counter column, in the notified row.
pub const COUNT: &str = "derived:count";

/// The observer.
pub struct Counter;

impl Observer for Counter {
    fn observe(txn: &mut impl Txn, n: &Notification) -> Result<()> {
        txn.add_u64(n.table(), n.row(), COUNT, 1)?;
        Ok(())
    }
}

percolator_guest::export_observer!(Counter);

#[cfg(test)]
mod tests {
    use super::*;
    use percolator_guest::mem::MemStore;

    #[test]
    fn counts_each_run() {
        let store = MemStore::new();
        store.declare_writes("t", &[COUNT]);
        store.put("t", "r", "raw:x", "1");
        for _ in 0..3 {
            store.observe::<Counter>(&store.notification("t", "r", "raw:x")).unwrap();
        }
        assert_eq!(store.get_u64("t", "r", COUNT), Some(3));
        assert_eq!(store.get_u64("t", "other", COUNT), None);
    }

    #[test]
    fn racing_runs_conflict_so_only_one_counts() {
        let store = MemStore::new();
        let n = store.notification("t", "r", "raw:x");
        let mut a = store.begin();
        let mut b = store.begin();
        Counter::observe(&mut a, &n).unwrap();
        Counter::observe(&mut b, &n).unwrap();
        a.commit().unwrap();
        assert!(b.commit().unwrap_err().is_conflict());
        assert_eq!(store.get_u64("t", "r", COUNT), Some(1));
    }
}
