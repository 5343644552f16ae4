//! The [`Timestamp`] newtype handed out by the [`Oracle`](crate::Oracle).

use std::fmt;

/// A logical timestamp from the timestamp oracle.
///
/// Start and commit timestamps share one strictly increasing sequence, so two transactions
/// never hold the same timestamp and a timestamp names at most one event. `Timestamp::ZERO`
/// is never issued; it means "before everything".
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(u64);

impl Timestamp {
    /// Before every issued timestamp.
    pub const ZERO: Timestamp = Timestamp(0);
    /// After every issued timestamp; reads at `MAX` see the newest committed version.
    pub const MAX: Timestamp = Timestamp(u64::MAX);

    /// Wraps a raw value (for decoding and tests; live code gets timestamps from the oracle).
    pub const fn from_raw(raw: u64) -> Timestamp {
        Timestamp(raw)
    }

    /// The raw value.
    pub const fn raw(self) -> u64 {
        self.0
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}
