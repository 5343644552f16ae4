//! `spin`: a hostile observer that never returns, for the host's time limit (epoch
//! interruption). It buffers a write first, which must never become visible.

use percolator_guest::{Notification, Observer, Result, Txn};

/// The observer.
pub struct Spin;

impl Observer for Spin {
    fn observe(txn: &mut impl Txn, n: &Notification) -> Result<()> {
        // Ignore the result: the point is the loop, whatever the binding allows.
        let _ = txn.set_str(n.table(), n.row(), "derived:spin", "must never commit");
        let mut i = txn.start_ts();
        loop {
            i = std::hint::black_box(i.wrapping_add(1));
        }
    }
}

percolator_guest::export_observer!(Spin);
