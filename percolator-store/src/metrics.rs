//! [`Metrics`]: the store's counters, listed once, and their totals across opens.
//!
//! One table below declares every counter with its help text. From it come the public
//! [`Metrics`] snapshot (a field per counter, documented with its help text), the store's
//! atomic counters, and [`Metrics::counters`], the list a caller renders (a JSON map, Prometheus
//! lines) without naming any counter. A new counter is one line of the table.
//!
//! The protocol's counters are totals over the store's life and over every host that shares
//! it: each is a metadata counter `metrics/<name>` (8 bytes, little-endian) to which the store
//! **adds** its counts since its last save ([`Op::MetaAdd`], atomic) when it closes and on
//! [`Store::persist_metrics`]; the next open starts from what it finds there, and each save
//! reads back what every host added.
//!
//! A user of the store keeps its own counts as totals the same way: [`Store::add_totals`] adds
//! named counts under a key of its choosing, and [`Store::saved_totals`] reads the totals back
//! (the host keeps each binding's observer runs so).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use crate::bigtable::{BackendStats, Bigtable, Op};
use crate::error::{Error, Result};
use crate::store::{Inner, Store};

/// Metadata key prefix of the saved totals: `metrics/<counter name>` → u64 little-endian.
const TOTALS_PREFIX: &str = "metrics/";

/// Metadata key prefix of the totals users of the store saved whole before they were added to
/// ([`Store::saved_totals`] still counts them): `totals/<key>` → [`encode_named`] of the
/// named counts.
const USER_TOTALS_PREFIX: &str = "totals/";

/// Metadata key prefix of the counters of [`Store::add_totals`]: `counts/<len>:<key>/<name>` →
/// u64 little-endian (the key's length makes a key that contains `/` unambiguous).
const USER_COUNTS_PREFIX: &str = "counts/";

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
/// [`Bigtable::stats`](crate::backends::Bigtable::stats), from when the store opened; `oracle`
/// ones from [`Oracle::issued`](crate::Oracle::issued), also from when the store opened.
macro_rules! counters {
    (
        totals { $($name:ident: $help:literal,)* }
        backend { $($b_name:ident = $b_field:ident: $b_help:literal,)* }
        oracle { $($o_name:ident: $o_help:literal,)* }
    ) => {
        /// A snapshot of the store's counters, from [`Store::metrics`]. Each field is documented
        /// with its help text; [`Metrics::counters`] lists them all with their names.
        ///
        /// Every counter but the backend's (`backend_commits`, `backend_ops`, `file_compactions`,
        /// `file_compactions_given_up`) and `oracle_timestamps` is a
        /// **total over the store's life**: what earlier opens of the same store saved (when
        /// they closed, or at [`Store::persist_metrics`]) plus what this store counted since it
        /// opened. A process that crashes loses its counts since its last save. Those count from
        /// when this store opened.
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        #[non_exhaustive]
        pub struct Metrics {
            $(#[doc = $help] pub $name: u64,)*
            $(#[doc = $b_help] pub $b_name: u64,)*
            $(#[doc = $o_help] pub $o_name: u64,)*
        }

        impl Metrics {
            /// Every counter, in declaration order, with its name, help text and value.
            pub fn counters(&self) -> impl ExactSizeIterator<Item = Counter> + use<> {
                [
                    $(Counter { name: stringify!($name), help: $help, value: self.$name },)*
                    $(Counter { name: stringify!($b_name), help: $b_help, value: self.$b_name },)*
                    $(Counter { name: stringify!($o_name), help: $o_help, value: self.$o_name },)*
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
            /// The counters now: `saved` plus this store's counts, the backend's `stats`
            /// since `opened`, and the oracle's count `issued`.
            fn snapshot(&self, saved: &Metrics, stats: BackendStats, opened: BackendStats, issued: u64) -> Metrics {
                Metrics {
                    $($name: saved.$name.saturating_add(self.$name.load(Ordering::Relaxed)),)*
                    $($b_name: stats.$b_field.saturating_sub(opened.$b_field),)*
                    $($o_name: issued,)*
                }
            }
        }
    };
}

counters! {
    totals {
        commits: "Committed read-write transactions.",
        one_pc_commits: "Commits done in one atomic step (one-phase commit).",
        async_secondaries: "Two-phase commits whose secondaries were left to the background writer.",
        conflicts: "Commits that failed with a conflict.",
        rolled_forward: "Locks of committed transactions finished by someone else (roll forward).",
        rolled_back: "Locks of dead or expired transactions removed (roll back).",
        lock_waits: "Times a read backed off on a live lock.",
        observer_runs: "Observer runs that committed.",
        observer_skips: "Notifications an observer skipped because its ack was already newer.",
        observer_failures: "Observer runs that failed (trap, error), conflicts not included.",
        observer_conflicts: "Observer runs lost to a conflict (in their reads or at their commit), run again after a backoff.",
        observer_store_failures:
            "Observer runs that met a failure of the store itself (a full disk, a server out of reach, a lapsed lease): not the observer's, run again after a second.",
        dead_letters: "Notifications moved to dead letters.",
        notifications_cleared: "Notify cells cleared.",
        teleports: "Scanner teleports (a scanner met a row another scanner held).",
        scanner_errors:
            "Errors a scanner met and retried later (reading pending notifications, processing one); no conflicts.",
        gc_runs: "Garbage collections run to the end.",
        gc_versions_removed: "Versions (write records and staged values) removed by garbage collection.",
        combine_folds: "Folds of combined cells that committed (their deltas folded into the base).",
        combine_deltas_folded: "Deltas of combined cells folded into their base.",
    }
    backend {
        backend_commits = commits:
            "Underlying backend commits (for redb: write transactions, each one fsync when durable).",
        backend_ops = ops: "Operations applied in those backend commits.",
        file_compactions = compactions:
            "For redb: compactions of the open file while the store was quiet (a copy of it that took its place).",
        file_compactions_given_up = compactions_given_up:
            "For redb: compactions given up, the file left as it was (the store stopped being quiet, or the copy failed: the log says why).",
    }
    oracle {
        oracle_timestamps: "Timestamps the oracle handed out to this store (the oracle's rate: their rate).",
    }
}

/// What a store adds its counts to.
pub(crate) struct Totals {
    /// The saved totals without this store's counts in them: what the store found at open,
    /// then what every host had saved at this store's last save, minus its own share.
    base: Mutex<Metrics>,
    /// The backend's stats when the store opened: the backend counters count from there.
    opened: BackendStats,
    /// This store's own counts that its saves have added so far. Also serializes saves, so
    /// that no count is added twice.
    added: Mutex<Metrics>,
}

/// The saved totals of the counters. A name this version does not know (a newer version's
/// counter) is left alone.
fn load_saved(backend: &dyn Bigtable) -> Result<Metrics> {
    let mut saved = Metrics::default();
    for (key, value) in backend.meta_scan(TOTALS_PREFIX)? {
        let Some(total) = saved.total_mut(&key[TOTALS_PREFIX.len()..]) else { continue };
        let bytes = value.try_into().map_err(|_| Error::Corrupt(format!("counter total {key:?} is not 8 bytes")))?;
        *total = u64::from_le_bytes(bytes);
    }
    Ok(saved)
}

/// `a - b`, counter by counter (saturating).
fn minus(a: &Metrics, b: &Metrics) -> Metrics {
    let mut out = *a;
    for (name, value) in b.totals() {
        if let Some(t) = out.total_mut(name) {
            *t = t.saturating_sub(value);
        }
    }
    out
}

impl Totals {
    /// Reads the saved totals.
    pub(crate) fn load(backend: &dyn Bigtable) -> Result<Totals> {
        let opened = backend.stats();
        let saved = load_saved(backend)?;
        Ok(Totals { base: Mutex::new(saved), opened, added: Mutex::new(Metrics::default()) })
    }
}

impl Inner {
    pub(crate) fn metrics(&self) -> Metrics {
        // A plain value no panic can leave half-written.
        let base = *self.totals.base.lock().unwrap_or_else(PoisonError::into_inner);
        self.counters.snapshot(&base, self.backend.stats(), self.totals.opened, self.oracle.issued())
    }

    /// This store's own counts of the protocol's counters (the backend's stats are not saved).
    fn own_counts(&self) -> Metrics {
        self.counters.snapshot(&Metrics::default(), BackendStats::default(), BackendStats::default(), 0)
    }

    pub(crate) fn persist_metrics(&self) -> Result<()> {
        let mut added = self.totals.added.lock().map_err(|_| Error::Closed)?;
        let own = self.own_counts();
        let ops: Vec<Op> = own
            .totals()
            .into_iter()
            .zip(added.totals())
            .filter(|((_, now), (_, last))| now > last)
            .map(|((name, now), (_, last))| Op::MetaAdd { key: format!("{TOTALS_PREFIX}{name}"), delta: now - last })
            .collect();
        if !ops.is_empty() {
            // After an error the counts are added again next time: an add whose outcome was
            // unknown may then count twice.
            self.backend.apply(ops)?;
            *added = own;
        }
        // What every host saved so far, less this store's share (which `metrics` adds live).
        let saved = load_saved(self.backend.as_ref())?;
        *self.totals.base.lock().map_err(|_| Error::Closed)? = minus(&saved, &added);
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
    /// Adds named counts of the caller's (an observer's runs and failures, say) to the totals
    /// saved under `key`; [`Store::saved_totals`] reads the totals back, also after the store
    /// is closed and opened again, and from any host that shares the store. This is how a user
    /// of the store keeps its own counters as totals across restarts and hosts, the way the
    /// store keeps its own (see [`Metrics`]): it adds what it counted since its last call, now
    /// and then and when it stops. `key` is any non-empty text. Each count is its own counter,
    /// added atomically, so hosts adding at once lose nothing.
    ///
    /// # After a failure
    /// Some counts may have been added and others not; if the outcome was unknown (the backend
    /// failed mid-write), adding the same counts again may count them twice.
    pub fn add_totals(&self, key: &str, counts: &[(&str, u64)]) -> Result<()> {
        user_totals_key(key)?;
        let ops: Vec<Op> = counts
            .iter()
            .filter(|(_, delta)| *delta > 0)
            .map(|(name, delta)| Op::MetaAdd { key: format!("{}{name}", user_counts_prefix(key)), delta: *delta })
            .collect();
        self.inner.backend.apply(ops)?;
        Ok(())
    }

    /// The totals of the counts [`Store::add_totals`] added under `key`, by name (with what an
    /// earlier version saved whole under it); empty if nothing was. Fails with
    /// [`Error::Corrupt`] if a saved value does not decode.
    pub fn saved_totals(&self, key: &str) -> Result<BTreeMap<String, u64>> {
        let whole = user_totals_key(key)?;
        let mut out = match self.inner.backend.meta_get(&whole)? {
            None => BTreeMap::new(),
            Some(value) => {
                decode_named(&value).ok_or_else(|| Error::Corrupt(format!("saved totals {whole:?} do not decode")))?
            }
        };
        let prefix = user_counts_prefix(key);
        for (k, value) in self.inner.backend.meta_scan(&prefix)? {
            let bytes: [u8; 8] =
                value.try_into().map_err(|_| Error::Corrupt(format!("saved count {k:?} is not 8 bytes")))?;
            let total = out.entry(k[prefix.len()..].to_owned()).or_default();
            *total = total.wrapping_add(u64::from_le_bytes(bytes));
        }
        Ok(out)
    }
}

fn user_counts_prefix(key: &str) -> String {
    format!("{USER_COUNTS_PREFIX}{}:{key}/", key.len())
}

fn user_totals_key(key: &str) -> Result<String> {
    if key.is_empty() {
        return Err(Error::InvalidArgument("the key of saved totals is empty".into()));
    }
    Ok(format!("{USER_TOTALS_PREFIX}{key}"))
}

/// Named counts as bytes: [`NAMED_FORMAT`], then per count its name's length (u32), the name
/// (UTF-8) and the count (u64), integers little-endian. (What earlier versions saved; written
/// now only by tests.)
#[cfg(test)]
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
        let m = Metrics { commits: 1, teleports: 2, backend_ops: 3, oracle_timestamps: 4, ..Metrics::default() };
        let list: Vec<Counter> = m.counters().collect();
        assert_eq!(list.len(), 25);
        let names: std::collections::BTreeSet<&str> = list.iter().map(|c| c.name).collect();
        assert_eq!(names.len(), list.len(), "names are unique");
        let value = |name: &str| list.iter().find(|c| c.name == name).unwrap().value;
        assert_eq!((value("commits"), value("teleports"), value("backend_ops")), (1, 2, 3));
        assert_eq!(value("oracle_timestamps"), 4);
        assert!(list.iter().all(|c| c.help.ends_with('.') && !c.help.contains('\n')), "one-line help texts");
    }

    #[test]
    fn added_totals_come_back_by_name() {
        let store = Store::in_memory(Default::default()).unwrap();
        assert!(store.saved_totals("observer/upper").unwrap().is_empty(), "nothing saved yet");
        store.add_totals("observer/upper", &[("runs", 7), ("failures", 1), ("ünïcode", u64::MAX)]).unwrap();
        store.add_totals("observer/other", &[("runs", 0)]).unwrap();
        // A key that is a prefix of another, with a slash: no mix-up.
        store.add_totals("observer/upper/runs", &[("x", 5)]).unwrap();
        let saved = store.saved_totals("observer/upper").unwrap();
        let expected = [("failures", 1), ("runs", 7), ("ünïcode", u64::MAX)].map(|(k, v)| (k.to_owned(), v));
        assert_eq!(saved, BTreeMap::from(expected));
        assert!(store.saved_totals("observer/other").unwrap().is_empty());
        // Adds add up; a whole set saved by an earlier version counts too.
        store.add_totals("observer/upper", &[("runs", 3)]).unwrap();
        store
            .inner
            .backend
            .apply(vec![Op::MetaPut { key: "totals/observer/upper".into(), value: encode_named(&[("runs", 100)]) }])
            .unwrap();
        assert_eq!(store.saved_totals("observer/upper").unwrap()["runs"], 110);
        // They are not the store's counters, nor dead letters.
        assert_eq!(store.metrics().observer_runs, 0);
        assert!(store.dead_letters().unwrap().is_empty());
        assert!(matches!(store.add_totals("", &[]), Err(Error::InvalidArgument(_))));
    }

    #[test]
    fn hosts_add_to_one_total_of_each_counter() {
        let backend: std::sync::Arc<dyn Bigtable> = std::sync::Arc::new(crate::backends::MemBigtable::new());
        let a = Store::with_backend(backend.clone(), Default::default()).unwrap();
        a.run(|t| t.set("t", "r", "c", "1")).unwrap();
        a.persist_metrics().unwrap();
        a.persist_metrics().unwrap();
        // Another host on the same backend adds its own commits.
        backend.apply(vec![Op::MetaAdd { key: "metrics/commits".into(), delta: 5 }]).unwrap();
        a.run(|t| t.set("t", "r", "c", "2")).unwrap();
        a.persist_metrics().unwrap();
        assert_eq!(a.metrics().commits, 7, "its own 2 and the other's 5, each counted once");
        assert_eq!(backend.meta_get("metrics/commits").unwrap(), Some(7u64.to_le_bytes().to_vec()));
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
