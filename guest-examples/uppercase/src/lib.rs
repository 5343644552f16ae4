//! `uppercase`: the smallest useful observer, for end-to-end tests of the host.
//!
//! Bind it to the column `raw:text`. On each notification it reads `raw:text` of the notified
//! row and writes the upper-cased text to `derived:upper` in the same row (deleting
//! `derived:upper` if `raw:text` is gone). A value that is not UTF-8 fails the run.
//! Reads: `raw:text`; writes: `derived:upper`, or the column its binding's parameter `target`
//! names (`[binding.params] target = "derived:shout"`), so it can be bound twice.

use percolator_guest::{Notification, Observer, Result, Txn};

/// The column read.
pub const SOURCE: &str = "raw:text";
/// The column written, in the same row.
pub const TARGET: &str = "derived:upper";

/// The observer.
pub struct Uppercase;

impl Observer for Uppercase {
    fn observe(txn: &mut impl Txn, n: &Notification) -> Result<()> {
        let target = txn.param("target").unwrap_or_else(|| TARGET.to_owned());
        match txn.get_str(n.table(), n.row(), SOURCE)? {
            Some(text) => txn.set_str(n.table(), n.row(), &target, &text.to_uppercase()),
            None => txn.delete(n.table(), n.row(), &target),
        }
    }
}

percolator_guest::export_observer!(Uppercase);

#[cfg(test)]
mod tests {
    use super::*;
    use percolator_guest::Error;
    use percolator_guest::mem::MemStore;

    #[test]
    fn writes_the_upper_cased_text_to_the_same_row() {
        let store = MemStore::new();
        store.declare_writes("docs", &[TARGET]);
        store.put("docs", "r1", SOURCE, "Hello, wörld");
        store.put("docs", "r2", SOURCE, "untouched");
        store.observe::<Uppercase>(&store.notification("docs", "r1", SOURCE)).unwrap();
        assert_eq!(store.get_str("docs", "r1", TARGET).as_deref(), Some("HELLO, WÖRLD"));
        assert_eq!(store.get("docs", "r2", TARGET), None);
    }

    #[test]
    fn the_target_column_is_the_bindings_parameter() {
        let store = MemStore::new();
        store.set_param("target", "derived:shout");
        store.put("docs", "r1", SOURCE, "hi");
        store.observe::<Uppercase>(&store.notification("docs", "r1", SOURCE)).unwrap();
        assert_eq!(store.get_str("docs", "r1", "derived:shout").as_deref(), Some("HI"));
        assert_eq!(store.get("docs", "r1", TARGET), None);
    }

    #[test]
    fn a_deleted_source_deletes_the_target() {
        let store = MemStore::new();
        store.put("docs", "r1", TARGET, "STALE");
        store.remove("docs", "r1", SOURCE);
        store.observe::<Uppercase>(&store.notification("docs", "r1", SOURCE)).unwrap();
        assert_eq!(store.get("docs", "r1", TARGET), None);
    }

    #[test]
    fn non_utf8_fails_and_writes_nothing() {
        let store = MemStore::new();
        store.put("docs", "r1", SOURCE, [0xff, 0xfe]);
        let err = store.observe::<Uppercase>(&store.notification("docs", "r1", SOURCE)).unwrap_err();
        assert!(matches!(err, Error::Failed(_)), "{err}");
        assert_eq!(store.get("docs", "r1", TARGET), None);
    }
}
