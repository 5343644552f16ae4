//! [`Metrics`]: the store's counters, listed once, and their totals across opens.
//!
//! One table below declares every counter with its help text. From it come the public
//! [`Metrics`] snapshot (a field per counter, documented with its help text), the store's
//! atomic counters, and [`Metrics::counters`], the list a caller renders (a JSON map, Prometheus
//! lines) without naming any counter. A new counter is one line of the table.
//!
//! The protocol's counters are totals over the store's life: each is saved under the metadata
//! key `metrics/<name>` (8 bytes, little-endian) when the store closes and on
//! [`Store::persist_metrics`], and the next open starts from what it finds there.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::bigtable::{BackendStats, Bigtable, Op};
use crate::error::{Error, Result};
use crate::store::{Inner, Store};

/// Metadata key prefix of the saved totals: `metrics/<counter name>` → u64 little-endian.
const TOTALS_PREFIX: &str = "metrics/";

/// One counter of [`Metrics`], as [`Metrics::counters`] lists it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Counter {
    /// The counter's name in snake case, the same as its [`Metrics`] field (`"commits"`).
    pub name: &'static str,
    /// What it counts, one sentence (the field's doc comment; fit for a Prometheus `# HELP`).
    pub help: &'static str,
    /// Its value.
    pub value: u64,
}

/// Declares the counters: `totals` are counted by the protocol (an atomic each) and saved
/// across opens; `backend` ones are read from the field of that name of
/// [`Bigtable::stats`](crate::backends::Bigtable::stats), from when the store opened.
macro_rules! counters {
    (
        totals { $($name:ident: $help:literal,)* }
        backend { $($b_name:ident = $b_field:ident: $b_help:literal,)* }
    ) => {
        /// A snapshot of the store's counters, from [`Store::metrics`]. Each field is documented
        /// with its help text; [`Metrics::counters`] lists them all with their names.
        ///
        /// Every counter but `backend_commits` and `backend_ops` is a **total over the store's
        /// life**: what earlier opens of the same store saved (when they closed, or at
        /// [`Store::persist_metrics`]) plus what this store counted since it opened. A process
        /// that crashes loses its counts since its last save. `backend_commits` and
        /// `backend_ops` count from when this store opened.
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        #[non_exhaustive]
        pub struct Metrics {
            $(#[doc = $help] pub $name: u64,)*
            $(#[doc = $b_help] pub $b_name: u64,)*
        }

        impl Metrics {
            /// Every counter, in declaration order, with its name, help text and value.
            pub fn counters(&self) -> impl ExactSizeIterator<Item = Counter> + use<> {
                [
                    $(Counter { name: stringify!($name), help: $help, value: self.$name },)*
                    $(Counter { name: stringify!($b_name), help: $b_help, value: self.$b_name },)*
                ]
                .into_iter()
            }

            /// The counters saved across opens, by name.
            fn totals(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($name), self.$name),)*]
            }

            fn total_mut(&mut self, name: &str) -> Option<&mut u64> {
                match name {
                    $(stringify!($name) => Some(&mut self.$name),)*
                    _ => None,
                }
            }
        }

        /// The protocol's counters since the store opened, bumped where things happen.
        #[derive(Default)]
        pub(crate) struct Counters {
            $(pub(crate) $name: AtomicU64,)*
        }

        impl Counters {
            /// The counters now: `saved` plus this store's counts, and the backend's `stats`
            /// since `opened`.
            fn snapshot(&self, saved: &Metrics, stats: BackendStats, opened: BackendStats) -> Metrics {
                Metrics {
                    $($name: saved.$name.saturating_add(self.$name.load(Ordering::Relaxed)),)*
                    $($b_name: stats.$b_field.saturating_sub(opened.$b_field),)*
                }
            }
        }
    };
}

counters! {
    totals {
        commits: "Committed read-write transactions.",
        one_pc_commits: "Commits done in one row operation (single-row transactions, one-phase commit).",
        conflicts: "Commits that failed with a conflict.",
        rolled_forward: "Locks of committed transactions finished by someone else (roll forward).",
        rolled_back: "Locks of dead or expired transactions removed (roll back).",
        lock_waits: "Times a read backed off on a live lock.",
        observer_runs: "Observer runs that committed.",
        observer_skips: "Notifications an observer skipped because its ack was already newer.",
        observer_failures: "Observer runs that failed (trap, error), conflicts not included.",
        dead_letters: "Notifications moved to dead letters.",
        notifications_cleared: "Notify cells cleared.",
        teleports: "Scanner teleports (a scanner met a row another scanner held).",
        scanner_errors:
            "Errors a scanner met and retried later (reading pending notifications, processing one); no conflicts.",
    }
    backend {
        backend_commits = commits:
            "Underlying backend commits (for redb: write transactions, each one fsync when durable).",
        backend_ops = ops: "Operations applied in those backend commits.",
    }
}

/// What a store started from, and what it saved last.
pub(crate) struct Totals {
    /// The totals found in the store when it opened.
    saved: Metrics,
    /// The backend's stats when the store opened: the backend counters count from there.
    opened: BackendStats,
    /// The totals the last save wrote (at open: `saved`). Also serializes saves, so that a
    /// slower save never overwrites a newer total.
    written: Mutex<Vec<(&'static str, u64)>>,
}

impl Totals {
    /// Reads the saved totals. A name this version does not know (a newer version's counter)
    /// is left alone.
    pub(crate) fn load(backend: &dyn Bigtable) -> Result<Totals> {
        let opened = backend.stats();
        let mut saved = Metrics::default();
        for (key, value) in backend.meta_scan(TOTALS_PREFIX)? {
            let Some(total) = saved.total_mut(&key[TOTALS_PREFIX.len()..]) else { continue };
            let bytes =
                value.try_into().map_err(|_| Error::Corrupt(format!("counter total {key:?} is not 8 bytes")))?;
            *total = u64::from_le_bytes(bytes);
        }
        Ok(Totals { saved, opened, written: Mutex::new(saved.totals()) })
    }
}

impl Inner {
    pub(crate) fn metrics(&self) -> Metrics {
        self.counters.snapshot(&self.totals.saved, self.backend.stats(), self.totals.opened)
    }

    pub(crate) fn persist_metrics(&self) -> Result<()> {
        let mut written = self.totals.written.lock().map_err(|_| Error::Closed)?;
        let now = self.metrics().totals();
        let ops: Vec<Op> = now
            .iter()
            .zip(written.iter())
            .filter(|(now, last)| now != last)
            .map(|(&(name, total), _)| Op::MetaPut {
                key: format!("{TOTALS_PREFIX}{name}"),
                value: total.to_le_bytes().to_vec(),
            })
            .collect();
        if !ops.is_empty() {
            self.backend.apply(ops)?;
            *written = now;
        }
        Ok(())
    }
}

impl Store {
    /// The store's counters (see [`Metrics`]: most are totals over the store's life).
    pub fn metrics(&self) -> Metrics {
        self.inner.metrics()
    }

    /// Saves the totals of the store's counters in the store, so that the next open continues
    /// from them (see [`Metrics`]). A store saves them when it closes (when its last clone, and
    /// the last [`Scanner`](crate::Scanner) and transaction using it, are dropped); calling this
    /// periodically bounds what a crash loses to the counts since the last call. Writes nothing
    /// if no total changed since the last save.
    ///
    /// # After a failure
    /// Some totals may have been saved and others not (each is its own metadata key, and each
    /// saved one is a true total at some moment). Nothing is lost from memory: the next call,
    /// or the close, writes them all again.
    pub fn persist_metrics(&self) -> Result<()> {
        self.inner.persist_metrics()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_list_every_field_once_with_its_name() {
        let m = Metrics { commits: 1, teleports: 2, backend_ops: 3, ..Metrics::default() };
        let list: Vec<Counter> = m.counters().collect();
        assert_eq!(list.len(), 15);
        let names: std::collections::BTreeSet<&str> = list.iter().map(|c| c.name).collect();
        assert_eq!(names.len(), list.len(), "names are unique");
        let value = |name: &str| list.iter().find(|c| c.name == name).unwrap().value;
        assert_eq!((value("commits"), value("teleports"), value("backend_ops")), (1, 2, 3));
        assert!(list.iter().all(|c| c.help.ends_with('.') && !c.help.contains('\n')), "one-line help texts");
    }
}
