//! Helpers shared by the integration tests.
#![allow(dead_code, unreachable_pub, missing_docs)]

use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use percolator_store::backends::{Bigtable, MemBigtable, RedbBigtable};
use percolator_store::{Durability, RedbConfig, Store, StoreConfig, Transaction};

/// A store and the backend under it. The store does not hand its backend out; tests that look
/// at stored versions (no lock left, GC removed what it should) keep it here.
#[derive(Clone)]
pub struct TestStore {
    pub store: Store,
    pub backend: Arc<dyn Bigtable>,
}

impl TestStore {
    pub fn new(backend: Arc<dyn Bigtable>, config: StoreConfig) -> TestStore {
        TestStore { store: Store::with_backend(backend.clone(), config).unwrap(), backend }
    }

    /// The redb store at `path`, with `durability`.
    pub fn open(path: &Path, config: StoreConfig, durability: Durability) -> TestStore {
        let redb = RedbBigtable::open(path, RedbConfig { durability, ..RedbConfig::default() }).unwrap();
        TestStore::new(Arc::new(redb), config)
    }
}

impl Deref for TestStore {
    type Target = Store;
    fn deref(&self) -> &Store {
        &self.store
    }
}

pub fn mem_store(config: StoreConfig) -> TestStore {
    TestStore::new(Arc::new(MemBigtable::new()), config)
}

pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("percolator-{name}-{}-{}", std::process::id(), rand_suffix()));
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    pub fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn rand_suffix() -> u64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().subsec_nanos() as u64
}

pub fn redb_store(dir: &TempDir, config: StoreConfig) -> TestStore {
    TestStore::open(&dir.file("store.redb"), config, Durability::None)
}

/// Short TTLs so abandoned locks are cleaned quickly in tests.
pub fn fast_locks() -> StoreConfig {
    StoreConfig { lock_ttl: Duration::from_millis(200), lock_wait: Duration::from_secs(5), ..StoreConfig::default() }
}

pub fn get_u64(t: &Transaction, table: &str, row: &str, col: &str) -> percolator_store::Result<u64> {
    Ok(t.get(table, row, col)?.map(|v| u64::from_be_bytes(v.try_into().unwrap())).unwrap_or(0))
}

pub fn set_u64(t: &mut Transaction, table: &str, row: &str, col: &str, v: u64) -> percolator_store::Result<()> {
    t.set(table, row, col, v.to_be_bytes())
}
