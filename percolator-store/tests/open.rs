//! Opening a store file: refused while it is open, and what carries over to the next open.

mod common;

use common::TempDir;
use percolator_store::{Durability, Error, RedbConfig, Store, StoreConfig};

fn open(path: &std::path::Path) -> percolator_store::Result<Store> {
    Store::open(path, StoreConfig::default(), RedbConfig { durability: Durability::None, ..RedbConfig::default() })
}

/// redb locks the file while it is open, for other handles of this process too: a second open
/// is refused with the variant a caller branches on, and succeeds once the first is closed.
#[test]
fn a_file_already_open_is_refused_with_already_open() {
    let dir = TempDir::new("already-open");
    let path = dir.file("store.redb");
    let first = open(&path).unwrap();
    first.run(|t| t.set("t", "r", "c:v", "kept")).unwrap();
    match open(&path) {
        Err(Error::AlreadyOpen { path: p }) => assert_eq!(p, path),
        Err(e) => panic!("expected AlreadyOpen, got {e:?}"),
        Ok(_) => panic!("a second open of an open file succeeded"),
    }
    let e = open(&path).err().unwrap();
    assert!(e.to_string().contains(&path.display().to_string()), "the message names the file: {e}");
    drop(first);
    let again = open(&path).unwrap();
    assert_eq!(again.begin().unwrap().get("t", "r", "c:v").unwrap(), Some(b"kept".to_vec()));
}
