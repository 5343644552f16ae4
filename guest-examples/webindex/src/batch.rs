//! The from-scratch batch computation. (Skeleton: being written.)

use std::collections::BTreeMap;

/// Cells of one table: (row, column) → value.
pub type Table = BTreeMap<(Vec<u8>, String), Vec<u8>>;
/// Tables by name.
pub type Tables = BTreeMap<String, Table>;

/// Computes every table of `docs/webindex.md` (raw inputs included, trigger columns excluded)
/// from the inputs: URL → (`raw:html`, `raw:pagerank`), each possibly absent.
pub fn compute(inputs: &BTreeMap<String, (Option<Vec<u8>>, Option<Vec<u8>>)>) -> Result<Tables, String> {
    let _ = inputs;
    unimplemented!("skeleton")
}
