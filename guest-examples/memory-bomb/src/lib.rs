//! `memory-bomb`: a hostile observer that allocates (and touches) 1 MiB after 1 MiB without
//! bound, for the host's memory limit. The allocation fails once the limit is reached, which
//! aborts the guest (a trap).

use percolator_guest::{Notification, Observer, Result, Txn};

/// The observer.
pub struct MemoryBomb;

impl Observer for MemoryBomb {
    fn observe(_txn: &mut impl Txn, _n: &Notification) -> Result<()> {
        let mut hoard: Vec<Vec<u8>> = Vec::new();
        loop {
            hoard.push(vec![0xA5; 1 << 20]);
            std::hint::black_box(&hoard);
        }
    }
}

percolator_guest::export_observer!(MemoryBomb);
