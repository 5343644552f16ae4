//! [`Metrics`]: the store's counters, listed once.
//!
//! One table below declares every counter with its help text. From it come the public
//! [`Metrics`] snapshot (a field per counter, documented with its help text), the store's
//! atomic counters, and [`Metrics::counters`], the list a caller renders (a JSON map, Prometheus
//! lines) without naming any counter. A new counter is one line of the table.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::bigtable::BackendStats;
use crate::store::Store;

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

/// Declares the counters: `store` ones are counted by the protocol (an atomic each), `backend`
/// ones are read from [`Bigtable::stats`](crate::backends::Bigtable::stats)'s field of that
/// name.
macro_rules! counters {
    (
        store { $($name:ident: $help:literal,)* }
        backend { $($b_name:ident = $b_field:ident: $b_help:literal,)* }
    ) => {
        /// A snapshot of the store's counters, from [`Store::metrics`]. Each field is documented
        /// with its help text; [`Metrics::counters`] lists them all with their names.
        ///
        /// Every counter counts from when this [`Store`] was opened.
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
        }

        /// The protocol's counters, bumped where things happen.
        #[derive(Default)]
        pub(crate) struct Counters {
            $(pub(crate) $name: AtomicU64,)*
        }

        impl Counters {
            /// The counters now, with the backend's `stats`.
            fn snapshot(&self, stats: BackendStats) -> Metrics {
                Metrics {
                    $($name: self.$name.load(Ordering::Relaxed),)*
                    $($b_name: stats.$b_field,)*
                }
            }
        }
    };
}

counters! {
    store {
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

impl Store {
    /// The store's counters (see [`Metrics`]).
    pub fn metrics(&self) -> Metrics {
        self.inner.counters.snapshot(self.inner.backend.stats())
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
