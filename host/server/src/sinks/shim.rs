//! TEMPORARY: the change feed's types as announced for `percolator-store/src/changes.rs`,
//! until it lands on main (then this file is deleted and `percolator_store`'s are used).
#![allow(dead_code)]

use std::fmt;
use std::str::FromStr;

use percolator_store::{CellRef, Timestamp};

/// One committed change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    /// The cell.
    pub cell: CellRef,
    /// The new value; `None`: deleted.
    pub value: Option<Vec<u8>>,
    /// Its commit timestamp.
    pub commit_ts: Timestamp,
}

/// A position in the feed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChangeToken(Timestamp);

impl ChangeToken {
    /// From the oldest change kept.
    pub fn origin() -> ChangeToken {
        ChangeToken(Timestamp::ZERO)
    }
    /// After every change at or below `ts` (shim only).
    pub fn at(ts: Timestamp) -> ChangeToken {
        ChangeToken(ts)
    }
    /// The position.
    pub fn position(&self) -> Timestamp {
        self.0
    }
}

impl fmt::Display for ChangeToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0.raw())
    }
}

impl FromStr for ChangeToken {
    type Err = String;
    fn from_str(s: &str) -> Result<ChangeToken, String> {
        s.parse::<u64>().map(|n| ChangeToken(Timestamp::from_raw(n))).map_err(|e| e.to_string())
    }
}

/// A page of the feed.
#[derive(Clone, Debug)]
pub struct ChangePage {
    /// Commit-ts order.
    pub changes: Vec<Change>,
    /// Resume here.
    pub next: ChangeToken,
}

/// TEMPORARY, until the store's change feed lands: every call fails.
impl super::Feed for percolator_store::Store {
    fn changes(&self, _: &str, _: &[String], _: &ChangeToken, _: usize) -> Result<ChangePage, String> {
        Err(UNAVAILABLE.into())
    }
    fn claim(&self, _: &str) -> Result<bool, String> {
        Err(UNAVAILABLE.into())
    }
    fn subscription(&self, _: &str) -> Result<Option<(ChangeToken, Option<u64>)>, String> {
        Err(UNAVAILABLE.into())
    }
    fn advance(&self, _: &str, _: &ChangeToken) -> Result<(), String> {
        Err(UNAVAILABLE.into())
    }
    fn set_change_log(&self, _: std::collections::BTreeSet<(String, String)>) -> Result<(), String> {
        Ok(())
    }
    fn trim(&self, _: Timestamp) -> Result<u64, String> {
        Ok(0)
    }
}

const UNAVAILABLE: &str = "the store's change feed is not in this build yet";
