//! Percolator (Peng & Dabek, OSDI 2010): snapshot-isolation transactions and observer
//! notifications over a Bigtable-like seam, with an embedded redb backend.
//!
//! ```
//! use percolator_store::{Store, StoreConfig};
//!
//! let store = Store::in_memory(StoreConfig::default())?;
//! // Figure 4's bank: Bob pays Joe $7.
//! store.run(|t| {
//!     t.set("bank", "Bob", "bal:data", 10u64.to_be_bytes())?;
//!     t.set("bank", "Joe", "bal:data", 2u64.to_be_bytes())
//! })?;
//! store.run(|t| {
//!     let get = |row: &str| -> percolator_store::Result<u64> {
//!         Ok(u64::from_be_bytes(t.get("bank", row, "bal:data")?.unwrap().try_into().unwrap()))
//!     };
//!     let (bob, joe) = (get("Bob")?, get("Joe")?);
//!     t.set("bank", "Bob", "bal:data", (bob - 7).to_be_bytes())?;
//!     t.set("bank", "Joe", "bal:data", (joe + 7).to_be_bytes())
//! })?;
//! let t = store.begin()?;
//! assert_eq!(t.get("bank", "Joe", "bal:data")?, Some(9u64.to_be_bytes().to_vec()));
//! # Ok::<(), percolator_store::Error>(())
//! ```
//!
//! Layers, bottom up: the seam ([`backends::Bigtable`]: versioned cells, conditional single-row
//! mutations, the notify locality group) with [`backends::RedbBigtable`] (what [`Store::open`]
//! uses) and [`backends::MemBigtable`] (what [`Store::in_memory`] uses); the [`Oracle`];
//! [`Transaction`] (prewrite, commit primary, commit secondaries, lock resolution);
//! notifications ([`Observer`], [`Store::start_scanner`]); and [`Store::gc`]. The root exports
//! what a user of the store needs; [`backends`] holds what a backend author needs.
//! `docs/design.md` in the repository describes the key encoding and protocol.

mod backend_coordination;
mod base_hints;
mod bigtable;
mod cells;
mod changes;
mod clock;
mod combine;
mod commit;
mod conflicts;
mod coordination;
mod dirty_rows;
mod error;
mod freshness;
mod gc;
mod group_commit;
mod key;
mod lock;
mod mem_backend;
mod memtable;
mod metrics;
mod notify;
mod observed;
mod oracle;
mod paced_file;
mod redb_backend;
mod redo;
mod registry;
mod scanner;
mod secondaries;
mod snapshot;
mod store;
mod timestamp;
mod transaction;
mod values;
mod worker;

/// The seam below the protocol, for backend authors and tests: the [`Bigtable`](backends::Bigtable)
/// trait, the row operations it applies and the records it stores, and the two backends.
///
/// A backend goes under a store with [`Store::with_backend`]. The store does not hand its
/// backend back out: an operation applied through the backend bypasses the protocol (locks,
/// notifications, the one-phase-commit fence) and can break snapshot isolation, so only the
/// code that built the backend (a test inspecting stored versions, a benchmark) keeps an `Arc`
/// of it.
pub mod backends {
    pub use crate::backend_coordination::BackendCoordination;
    pub use crate::bigtable::{
        AtomicOutcome, BackendStats, Bigtable, CellRead, CellVersions, Condition, Found, LockRecord, Mutation,
        NotifyEntry, Op, Outcome, RowMutation, RowVersions, ScanRange, ScannedCell, Snapshot, StorageFailure,
        WriteKind, WriteRecord, Writer, check_atomic_group, notify_position,
    };
    pub use crate::coordination::{Coordination, Published, Renewed, decode_lease, encode_lease};
    pub use crate::mem_backend::MemBigtable;
    pub use crate::observed::{ApplyHook, Observed};
    pub use crate::redb_backend::RedbBigtable;
    pub use crate::values::{COMPRESS_FROM, decode_value, encode_value};

    /// The key encoding every backend stores cells under (`docs/design.md`, "Key encoding").
    pub mod keys {
        pub use crate::key::{DecodedKey, Kind, cell_prefix, decode_version_key, row_prefix, version_key};
    }

    /// The meaning of a snapshot read over any ordered map (the read rule, defined once), for
    /// a backend that runs it in the client over a view of its engine.
    pub mod cells {
        pub use crate::cells::{
            KvRead, Visitor, WriteValues, find_write, meta_scan, one_row_prefix, read_data, read_row, scan,
            scan_notify, scan_versions, versions_of_rows,
        };
    }

    /// The byte encodings of the records a backend stores, for a backend that writes them
    /// itself (the Redis backend's server-side row transaction).
    pub mod codec {
        pub use crate::bigtable::codec::{decode_lock, encode_lock, encode_write, encode_writer};
    }
}

pub use bigtable::{CellRef, StorageFailure};
pub use changes::{Change, ChangePage, ChangeToken, MAX_CHANGES_PER_PAGE, Subscription};
pub use combine::{CombineOp, CombineSpec, CombineType, Delta, FOLDER};
pub use commit::ONE_PHASE_MAX_ROWS;
pub use conflicts::{
    CONFLICT_AGING, CONFLICT_BACKOFF, CONFLICT_BACKOFF_MAX, HOT_CELLS_PER_MINUTE, HOT_ROWS_MINUTES, HotRow, RunOutcomes,
};
pub use error::{ConflictKind, Error, Result};
pub use freshness::{FRESHNESS_BUCKETS, FreshnessCounts, histogram_quantile};
pub use gc::{Compaction, GcRunner, GcStats};
pub use key::{
    MAX_NAME_LEN, MAX_ROW_LEN, RESERVED_COLUMN_PREFIX, prefix_end, validate_column, validate_row, validate_table,
};
pub use metrics::{Counter, Metrics};
pub use notify::{
    CellOutcome, DeadLetter, NOTIFY_EXISTING_PAGE, Notification, NotifyKind, ObserveError, Observer, ObserverSpec,
    UNBOUND, validate_observer_name,
};
pub use oracle::Oracle;
pub use redb_backend::{Durability, RedbConfig, Space};
pub use scanner::{SHARE_REFRESH, Scanner, ScannerConfig, WorkerShare};
pub use snapshot::{MAX_PIN_TTL, Pin};
pub use store::{RetryPolicy, Store, StoreConfig};
pub use timestamp::Timestamp;
pub use transaction::TimedEntry;
pub use transaction::{ScanEntry, Transaction};

/// Whether a test configured a failpoint (`fail::cfg`, or `FAILPOINTS` read by a
/// `FailScenario`): then a commit prewrites the primary alone, then the first secondary alone,
/// and writes the first secondary's commit record alone, so that a test can stop between any
/// two. Without one the store batches as it does without the feature: a build with failpoints
/// compiled in behaves as production until a test configures one (the whole test suite runs
/// from such a build).
pub(crate) fn failpoints_configured() -> bool {
    #[cfg(feature = "failpoints")]
    {
        !fail::list().is_empty()
    }
    #[cfg(not(feature = "failpoints"))]
    {
        false
    }
}
