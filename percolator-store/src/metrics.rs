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
//!
//! A user of the store keeps its own counts as totals the same way: [`Store::save_totals`]
//! saves a set of named counts under a key of its choosing (`totals/<key>`), and
//! [`Store::saved_totals`] reads them back after the next open (the host keeps each binding's
//! observer runs so).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::bigtable::{BackendStats, Bigtable, Op};
use crate::error::{Error, Result};
use crate::store::{Inner, Store};

/// Metadata key prefix of the saved totals: `metrics/<counter name>` → u64 little-endian.
const TOTALS_PREFIX: &str = "metrics/";

/// Metadata key prefix of the totals users of the store save ([`Store::save_totals`]):
/// `totals/<key>` → [`encode_named`] of the named counts.
const USER_TOTALS_PREFIX: &str = "totals/";

/// Version byte of [`encode_named`]'s format.
const NAMED_FORMAT: u8 = 1;

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

impl Store {
    /// Saves `totals`, named counts of the caller's (an observer's runs and failures, say),
    /// under `key`, replacing whatever was saved there; [`Store::saved_totals`] reads them
    /// back, also after the store is closed and opened again. This is how a user of the store
    /// keeps its own counters as totals across restarts, the way the store keeps its own (see
    /// [`Metrics`]): it starts from the saved counts when it opens and saves its counts now and
    /// then, and when it stops. `key` is any non-empty text; names may repeat (the last one
    /// wins when read).
    ///
    /// # After a failure
    /// Nothing was saved under `key` or everything was: the counts are one metadata value,
    /// written in one operation. What was saved before stays until a save succeeds.
    pub fn save_totals(&self, key: &str, totals: &[(&str, u64)]) -> Result<()> {
        let key = user_totals_key(key)?;
        self.inner.backend.apply(vec![Op::MetaPut { key, value: encode_named(totals) }])?;
        Ok(())
    }

    /// The counts [`Store::save_totals`] last saved under `key`, by name; empty if nothing
    /// was saved there. Fails with [`Error::Corrupt`] if the saved value does not decode.
    pub fn saved_totals(&self, key: &str) -> Result<BTreeMap<String, u64>> {
        let key = user_totals_key(key)?;
        match self.inner.backend.meta_get(&key)? {
            None => Ok(BTreeMap::new()),
            Some(value) => {
                decode_named(&value).ok_or_else(|| Error::Corrupt(format!("saved totals {key:?} do not decode")))
            }
        }
    }
}

fn user_totals_key(key: &str) -> Result<String> {
    if key.is_empty() {
        return Err(Error::InvalidArgument("the key of saved totals is empty".into()));
    }
    Ok(format!("{USER_TOTALS_PREFIX}{key}"))
}

/// Named counts as bytes: [`NAMED_FORMAT`], then per count its name's length (u32), the name
/// (UTF-8) and the count (u64), integers little-endian.
fn encode_named(totals: &[(&str, u64)]) -> Vec<u8> {
    let mut out = vec![NAMED_FORMAT];
    for (name, value) in totals {
        out.extend_from_slice(&(name.len() as u32).to_le_bytes());
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(&value.to_le_bytes());
    }
    out
}

/// The counts of [`encode_named`]'s bytes, or None if they are not such bytes.
fn decode_named(bytes: &[u8]) -> Option<BTreeMap<String, u64>> {
    let mut rest = bytes.strip_prefix(&[NAMED_FORMAT])?;
    let mut out = BTreeMap::new();
    while !rest.is_empty() {
        let (len, tail) = rest.split_first_chunk::<4>()?;
        let len = usize::try_from(u32::from_le_bytes(*len)).ok()?;
        let name = std::str::from_utf8(tail.get(..len)?).ok()?;
        let (value, tail) = tail[len..].split_first_chunk::<8>()?;
        out.insert(name.to_owned(), u64::from_le_bytes(*value));
        rest = tail;
    }
    Some(out)
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

    #[test]
    fn saved_totals_come_back_by_name() {
        let store = Store::in_memory(Default::default()).unwrap();
        assert!(store.saved_totals("observer/upper").unwrap().is_empty(), "nothing saved yet");
        store.save_totals("observer/upper", &[("runs", 7), ("failures", 1), ("ünïcode", u64::MAX)]).unwrap();
        store.save_totals("observer/other", &[]).unwrap();
        let saved = store.saved_totals("observer/upper").unwrap();
        let expected = [("failures", 1), ("runs", 7), ("ünïcode", u64::MAX)].map(|(k, v)| (k.to_owned(), v));
        assert_eq!(saved, BTreeMap::from(expected));
        assert!(store.saved_totals("observer/other").unwrap().is_empty());
        // A save replaces the whole set.
        store.save_totals("observer/upper", &[("runs", 8)]).unwrap();
        assert_eq!(store.saved_totals("observer/upper").unwrap(), BTreeMap::from([("runs".to_owned(), 8)]));
        // They are not the store's counters, nor dead letters.
        assert_eq!(store.metrics().observer_runs, 0);
        assert!(store.dead_letters().unwrap().is_empty());
        assert!(matches!(store.save_totals("", &[]), Err(Error::InvalidArgument(_))));
    }

    #[test]
    fn named_counts_that_do_not_decode_are_refused() {
        let good = encode_named(&[("runs", 3)]);
        assert_eq!(decode_named(&good), Some(BTreeMap::from([("runs".to_owned(), 3)])));
        assert_eq!(decode_named(&[NAMED_FORMAT]), Some(BTreeMap::new()));
        for bad in [&[][..], &[2], &good[..good.len() - 1], &[1, 9, 0, 0, 0, b'r']] {
            assert_eq!(decode_named(bad), None, "{bad:?}");
        }
    }
}
