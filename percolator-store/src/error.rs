//! Error types. [`Error`] is the one error every public operation returns; match on
//! [`Error::is_retryable`] (or [`Error::Conflict`]) to decide whether to run the transaction again.

use std::fmt;
use std::path::PathBuf;

/// Why a transaction lost a race. Every conflict is retryable with a new start timestamp.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConflictKind {
    /// Prewrite found a write committed at or after this transaction's start (write-write
    /// conflict: the snapshot-isolation "first committer wins" rule).
    WriteAfterStart,
    /// Prewrite found another transaction's lock on a cell this one writes.
    Locked,
    /// A read waited for a lock longer than `lock_wait` and the lock's owner is still alive.
    LockWaitTimeout,
    /// The primary lock was gone at the commit point: another transaction rolled this one back
    /// (it looked dead or its TTL had expired).
    RolledBack,
}

impl fmt::Display for ConflictKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ConflictKind::WriteAfterStart => "a newer write was committed after this transaction started",
            ConflictKind::Locked => "another transaction holds a lock on the cell",
            ConflictKind::LockWaitTimeout => "timed out waiting for a live transaction's lock",
            ConflictKind::RolledBack => "the transaction was rolled back by another worker before its commit point",
        })
    }
}

/// The error of every operation in this crate.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The transaction lost a race; nothing it wrote is visible. Retry with a new transaction
    /// (see [`Store::run`](crate::Store::run)).
    #[error("conflict on {cell}: {kind}")]
    Conflict {
        /// What happened.
        kind: ConflictKind,
        /// The cell, as `table/row/column`.
        cell: String,
        /// The same cell, as parts (a row or names may hold `/`, which makes `cell` ambiguous).
        at: Box<crate::CellRef>,
    },
    /// A caller passed something unusable: an empty or over-long name, a write to a
    /// reserved or weak-only column, an unknown observer.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A named thing does not exist (a dead letter, an observer).
    #[error("not found: {0}")]
    NotFound(String),
    /// The store file is already open, by another process or by another handle in this one
    /// (redb locks the file while it is open). Nothing was opened or changed; a caller may wait
    /// for the holder to close it, or reach the store through the holder instead.
    #[error("{} is already open (by another process, or another handle in this process)", path.display())]
    AlreadyOpen {
        /// The file, as given to [`Store::open`](crate::Store::open).
        path: PathBuf,
    },
    /// The backend failed (redb, a malformed answer). Whether a commit took effect is described
    /// on [`Transaction::commit`](crate::Transaction::commit).
    #[error("storage: {0}")]
    Storage(String),
    /// Writing or reading the store's file failed at the device: the disk is full
    /// ([`Error::is_disk_full`]), or another I/O error. Nothing of the operation that met it is
    /// durable. The redb backend then refuses every write with this same error (the first
    /// failure, with its file) and keeps serving reads, until a write succeeds again: it
    /// reopens its file and tries a probe write (1 MiB) by itself, with backoff (`docs/design.md`,
    /// "A full disk"); [`Store::storage_failure`](crate::Store::storage_failure) reports it
    /// meanwhile. Not a failure of an observer: a run that meets it backs off without
    /// counting an attempt.
    #[error("{}: {message}{}", path.display(), if *disk_full { " (the disk is full: the store refuses writes until space is freed)" } else { "" })]
    Io {
        /// The file.
        path: PathBuf,
        /// The system's description of the error, as `std::io::Error` prints it
        /// (`No space left on device (os error 28)`).
        message: String,
        /// The device is full (`ENOSPC`) or a quota is exhausted (`EDQUOT`).
        disk_full: bool,
    },
    /// A server the backend needs could not be reached or did not serve the request in time
    /// (a Redis Cluster node down, a failover in progress), or this worker's lease lapsed
    /// (its reads and its commit cannot be trusted). The message names the server or the
    /// lease; a commit that fails so may or may not have taken effect, as described on
    /// [`Transaction::commit`](crate::Transaction::commit). Like [`Error::Io`], not a failure
    /// of an observer ([`Error::is_storage_failure`]).
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// Stored bytes do not decode: the file is damaged or was written by an incompatible version.
    #[error("corrupt store: {0}")]
    Corrupt(String),
    /// A read at an explicit snapshot ([`Store::begin_at`](crate::Store::begin_at)) is below
    /// the persisted GC safepoint: versions it needs may be gone, so it is refused (also after
    /// the read, if a GC pass raised the safepoint meanwhile) rather than returning part of a
    /// snapshot. Pin a snapshot ([`Store::pin_snapshot`](crate::Store::pin_snapshot)) to keep it.
    #[error(
        "snapshot {ts} is below the GC safepoint {safepoint}: versions it needs may be gone; pin a snapshot \
         (percolator snapshot --ttl) to keep it"
    )]
    SnapshotTooOld {
        /// The snapshot asked for.
        ts: crate::Timestamp,
        /// The persisted safepoint found.
        safepoint: crate::Timestamp,
    },
    /// The store is shutting down.
    #[error("store is closed")]
    Closed,
    /// A change-feed position is older than the oldest change the log still keeps: changes
    /// after it may have been removed. Nothing was read; the consumer must start again from a
    /// snapshot (or from the oldest change kept) instead of resuming.
    #[error(
        "the change log was trimmed up to {trimmed}, past the position {position}: changes after it may be gone; \
         start again from a snapshot (or without a position, from the oldest change kept)"
    )]
    ChangesTrimmed {
        /// The position asked for.
        position: crate::timestamp::Timestamp,
        /// The change log keeps only changes committed above this.
        trimmed: crate::timestamp::Timestamp,
    },
}

impl Error {
    /// True for errors that a new transaction may not meet again (conflicts).
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Conflict { .. })
    }

    pub(crate) fn conflict(kind: ConflictKind, table: &str, row: &[u8], column: &str) -> Error {
        let at = crate::CellRef::new(table, row, column);
        Error::Conflict { kind, cell: at.to_string(), at: Box::new(at) }
    }

    /// True for [`Error::Io`] meeting a full disk (or an exhausted quota).
    pub fn is_disk_full(&self) -> bool {
        matches!(self, Error::Io { disk_full: true, .. })
    }

    /// True if the store itself cannot serve now: its file failed ([`Error::Io`]), or a server
    /// it needs is out of reach or its lease lapsed ([`Error::Unavailable`]). Retrying at once
    /// likely meets the same error, and it says nothing about the transaction or observer
    /// that met it: an observer run that meets it counts no attempt and goes to no dead letter.
    pub fn is_storage_failure(&self) -> bool {
        matches!(self, Error::Io { .. } | Error::Unavailable(_))
    }

    /// An [`Error::Io`] for `e`, met on `path`.
    pub(crate) fn io(path: &std::path::Path, e: &std::io::Error) -> Error {
        use std::io::ErrorKind;
        Error::Io {
            path: path.to_owned(),
            message: e.to_string(),
            disk_full: matches!(e.kind(), ErrorKind::StorageFull | ErrorKind::QuotaExceeded),
        }
    }

    /// The cell a conflict was met on; `None` for every other error.
    pub fn conflict_cell(&self) -> Option<&crate::CellRef> {
        match self {
            Error::Conflict { at, .. } => Some(at),
            _ => None,
        }
    }
}

/// The message of an [`Error::Io`] that redb latched after an earlier I/O error
/// (`PreviousIo`), or met on a database closed by a reopen: the backend answers it with the
/// failure it recorded, which names the cause (`RedbBigtable`'s `located`).
pub(crate) const LATCHED: &str = "an earlier I/O error stopped the file";

impl Error {
    /// An [`Error::Io`] latched by an earlier one ([`LATCHED`]).
    pub(crate) fn is_latched(&self) -> bool {
        matches!(self, Error::Io { message, .. } if message == LATCHED)
    }

    fn latched() -> Error {
        Error::Io { path: PathBuf::new(), message: LATCHED.into(), disk_full: false }
    }
}

// redb's errors: an I/O error becomes [`Error::Io`] without its file (the backend, which
// knows it, fills it in: `RedbBigtable`'s `located`), so does the latch of an earlier one;
// everything else, redb's own words.
impl From<redb::StorageError> for Error {
    fn from(e: redb::StorageError) -> Error {
        match e {
            redb::StorageError::Io(e) => Error::io(std::path::Path::new(""), &e),
            redb::StorageError::PreviousIo | redb::StorageError::DatabaseClosed => Error::latched(),
            e => Error::Storage(e.to_string()),
        }
    }
}

impl From<redb::Error> for Error {
    fn from(e: redb::Error) -> Error {
        match e {
            redb::Error::Io(e) => Error::io(std::path::Path::new(""), &e),
            redb::Error::PreviousIo | redb::Error::DatabaseClosed => Error::latched(),
            e => Error::Storage(e.to_string()),
        }
    }
}

macro_rules! storage_from {
    ($($t:ty),*) => {$(
        impl From<$t> for Error {
            fn from(e: $t) -> Error {
                redb::Error::from(e).into()
            }
        }
    )*};
}
storage_from!(
    redb::DatabaseError,
    redb::TransactionError,
    redb::TableError,
    redb::CommitError,
    redb::SetDurabilityError
);

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Error {
        Error::Storage(e.to_string())
    }
}

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
