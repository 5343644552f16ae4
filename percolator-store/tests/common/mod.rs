//! Helpers shared by the integration tests.
#![allow(dead_code, unreachable_pub, missing_docs)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use percolator_store::{Durability, MemBigtable, RedbConfig, Store, StoreConfig, Transaction};

pub fn mem_store(config: StoreConfig) -> Store {
    Store::with_backend(Arc::new(MemBigtable::new()), config).unwrap()
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

pub fn redb_store(dir: &TempDir, config: StoreConfig) -> Store {
    Store::open(dir.file("store.redb"), config, RedbConfig { durability: Durability::None, ..RedbConfig::default() })
        .unwrap()
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
