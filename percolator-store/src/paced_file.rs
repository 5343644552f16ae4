//! redb's file, made durable in steps as a checkpoint writes it (`docs/design.md`, "A memtable
//! in front of redb", 12.).
//!
//! A checkpoint writes a few seconds of rounds to redb, tens of megabytes, and redb makes them
//! durable with one `fdatasync` at its commit. Every round's own `fdatasync` of the redo log
//! meanwhile waits behind that flush on the same disk (measured: 1–3 ms alone, 240–310 ms during a
//! checkpoint's), and every observer run waiting for its commit waits with it: the web index's
//! load fell to a quarter of a core at each checkpoint. [`PacedFile`] syncs the file whenever
//! [`SYNC_STEP`] bytes were written since its last sync, so that what a round's flush can find
//! ahead of it on the disk is at most one step. RocksDB's `bytes_per_sync` does the same for its
//! table files.
//!
//! A sync between two of redb's writes changes nothing redb relies on: its commit protocol holds
//! whatever order the kernel writes pages in, so making some of them durable earlier is one of
//! the orders it already allows.

use std::fs::File;
use std::io;
use std::ops::Bound;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use redb::StorageBackend;
use redb::backends::FileBackend;

/// Bytes written between two syncs of the file (1 MiB: a few milliseconds of this machine's disk).
pub(crate) const SYNC_STEP: u64 = 1 << 20;

/// A [`FileBackend`] that syncs after every `step` bytes written.
#[derive(Debug)]
pub(crate) struct PacedFile {
    file: FileBackend,
    step: u64,
    /// Bytes written since the last sync.
    unsynced: AtomicU64,
    /// Syncs made by the pacing (not counting redb's own), shared with whoever counts them.
    steps: Arc<AtomicU64>,
}

impl PacedFile {
    /// `file`, synced after every `step` bytes written; each such sync is counted in `steps`.
    pub(crate) fn new(
        file: File,
        step: u64,
        steps: Arc<AtomicU64>,
    ) -> std::result::Result<PacedFile, redb::DatabaseError> {
        Ok(PacedFile { file: FileBackend::new(file)?, step, unsynced: AtomicU64::new(0), steps })
    }
}

impl StorageBackend for PacedFile {
    fn len(&self) -> io::Result<u64> {
        self.file.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        self.file.read(offset, out)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.unsynced.store(0, Ordering::Relaxed);
        self.file.sync_data()
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.file.write(offset, data)?;
        let len = data.len() as u64;
        if self.unsynced.fetch_add(len, Ordering::Relaxed) + len >= self.step {
            self.unsynced.store(0, Ordering::Relaxed);
            self.steps.fetch_add(1, Ordering::Relaxed);
            self.file.sync_data()?;
        }
        Ok(())
    }

    fn close(&self) -> io::Result<()> {
        self.file.close()
    }

    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, redb::BackendError> {
        self.file.try_lock_range(start, end)
    }

    fn try_lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, redb::BackendError> {
        self.file.try_lock_shared_range(start, end)
    }

    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), redb::BackendError> {
        self.file.lock_range(start, end)
    }

    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), redb::BackendError> {
        self.file.lock_shared_range(start, end)
    }

    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), redb::BackendError> {
        self.file.unlock_range(start, end)
    }

    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, redb::BackendError> {
        self.file.query_lock_range(start, end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use percolator_testkit::TempDir;
    use redb::{Database, ReadableDatabase, TableDefinition};

    const T: TableDefinition<u32, &[u8]> = TableDefinition::new("t");

    /// A commit that writes many steps' worth syncs once per step on the way, and what it
    /// wrote reads back whole after the file is opened again without the pacing.
    #[test]
    fn a_large_commit_is_synced_in_steps_and_reads_back_whole() {
        let dir = TempDir::new("paced");
        let path = dir.file("p.redb");
        let steps = Arc::new(AtomicU64::new(0));
        let value = |n: u32| vec![(n % 251) as u8; 4096];
        {
            let file =
                std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&path).unwrap();
            let db = Database::builder()
                .create_with_backend(PacedFile::new(file, 64 << 10, Arc::clone(&steps)).unwrap())
                .unwrap();
            let opened = steps.load(Ordering::Relaxed);
            let tx = db.begin_write().unwrap();
            {
                let mut t = tx.open_table(T).unwrap();
                for n in 0..1024 {
                    t.insert(n, value(n).as_slice()).unwrap();
                }
            }
            tx.commit().unwrap();
            // 4 MiB of values (and redb's pages around them) in steps of 64 KiB.
            let paced = steps.load(Ordering::Relaxed) - opened;
            assert!((64..=256).contains(&paced), "{paced} syncs for about 4 MiB in steps of 64 KiB");
        }
        let db = Database::open(&path).unwrap();
        let tx = db.begin_read().unwrap();
        let t = tx.open_table(T).unwrap();
        for n in 0..1024 {
            assert_eq!(t.get(n).unwrap().unwrap().value(), value(n).as_slice(), "value {n}");
        }
    }
}
