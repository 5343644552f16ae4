//! `counter-v2`: the second version of [`counter`](../counter), for hot-reload tests.
//!
//! Like `counter` it adds 1 to `derived:count` in the notified row, and it also writes
//! `derived:version = "v2"`, so a test can tell which version processed each change.

use percolator_guest::{Notification, Observer, Result, Txn};

/// The counter column, in the notified row.
pub const COUNT: &str = "derived:count";
/// Which version ran.
pub const VERSION: &str = "derived:version";

/// The observer.
pub struct CounterV2;

impl Observer for CounterV2 {
    fn observe(txn: &mut impl Txn, n: &Notification) -> Result<()> {
        txn.add_u64(n.table(), n.row(), COUNT, 1)?;
        txn.set_str(n.table(), n.row(), VERSION, "v2")
    }
}

percolator_guest::export_observer!(CounterV2);

#[cfg(test)]
mod tests {
    use super::*;
    use percolator_guest::mem::MemStore;

    #[test]
    fn counts_and_marks_its_version() {
        let store = MemStore::new();
        store.put("t", "r", "raw:x", "1");
        store.observe::<CounterV2>(&store.notification("t", "r", "raw:x")).unwrap();
        assert_eq!(store.get_u64("t", "r", COUNT), Some(1));
        assert_eq!(store.get_str("t", "r", VERSION).as_deref(), Some("v2"));
    }
}
