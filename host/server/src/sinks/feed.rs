//! What a sink runner needs of the store: its change feed and named subscriptions. A trait, so
//! that the runner is tested against a model with failures injected (`tests` below) as well as
//! against the real [`Store`].

use percolator_store::Store;

use super::{ChangePage, ChangeToken};

/// The change feed and the subscriptions, as the runner uses them (errors as text: the runner
/// only shows and retries them).
pub trait Feed: Send + Sync + 'static {
    /// Committed changes to `columns` of `table` after `since`, in commit-timestamp order, at
    /// most about `limit`, and where to resume.
    fn changes(&self, table: &str, columns: &[String], since: &ChangeToken, limit: usize)
    -> Result<ChangePage, String>;
    /// True if this worker owns subscription `name` now (creating it, or taking it over from
    /// a dead owner).
    fn claim(&self, name: &str) -> Result<bool, String>;
    /// The subscription's position and its owner's worker id.
    fn subscription(&self, name: &str) -> Result<Option<(ChangeToken, Option<u64>)>, String>;
    /// Moves the subscription to `to`; an error if this worker no longer owns it.
    fn advance(&self, name: &str, to: &ChangeToken) -> Result<(), String>;
}

impl Feed for Store {
    fn changes(
        &self,
        table: &str,
        columns: &[String],
        since: &ChangeToken,
        limit: usize,
    ) -> Result<ChangePage, String> {
        Store::changes(self, table, Some(columns), since, limit).map_err(|e| e.to_string())
    }

    fn claim(&self, name: &str) -> Result<bool, String> {
        self.claim_subscription(name).map_err(|e| e.to_string())
    }

    fn subscription(&self, name: &str) -> Result<Option<(ChangeToken, Option<u64>)>, String> {
        Store::subscription(self, name).map(|s| s.map(|s| (s.position, s.owner))).map_err(|e| e.to_string())
    }

    fn advance(&self, name: &str, to: &ChangeToken) -> Result<(), String> {
        match self.advance_subscription(name, to) {
            Ok(true) => Ok(()),
            Ok(false) => Err("another worker owns it now".to_owned()),
            Err(e) => Err(e.to_string()),
        }
    }
}
