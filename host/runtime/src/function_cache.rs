//! Cranelift's incremental compilation cache, on disk: each compiled function of every component
//! the runtime compiles, kept in the cache folder under its cache key, so that a component that
//! shares functions with one compiled before (any other Python guest: the same CPython
//! interpreter; any other JavaScript guest: the same JavaScript engine; an edited guest: every
//! function but the edited ones) compiles only what is new.
//!
//! Cranelift computes the key (`cranelift_codegen::incremental_cache`): a SHA-256 of the
//! function's code modulo the names it calls (the names are applied after a hit), and of the
//! target ISA's flags; an entry also carries cranelift's version, checked on every hit. The
//! folder is named by wasmtime's compatibility hash as well, so a new wasmtime starts a folder
//! of its own.
//!
//! **Packs.** The functions one compile added are written together, when it ends, as one pack
//! file (`<pid>-<nanoseconds>-<n>.pack`, through a unique temp file and a rename): a Python
//! guest has some 20,000 functions, and a file each cost more in the kernel than the compile
//! saved. Entry: key length and value length (u32, little-endian), the SHA-256 of both lengths,
//! the key and the value, then the key and the value. An index of every pack (key → pack,
//! offset) is read when the runtime starts and before each compile, so hosts sharing the
//! folder see each other's packs; a get reads its entry with positioned reads, from at most 32
//! packs kept open (others are opened as needed).
//!
//! **Damage is a miss.** An entry is served only if its bytes match its digest (for its own
//! key); a pack whose header or an entry's lengths do not parse is indexed up to there. So packs
//! need no fsync: a torn or lost pack after a crash costs recompiles, never wrong code. A pack
//! that cannot be written (a full disk) is counted and warned about once; compiling goes on.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};
use wasmtime::CacheStore;

/// First bytes of a pack.
const MAGIC: &[u8; 16] = b"percolator-fns1\n";
const DIGEST_LEN: usize = 32;
/// Lengths (2 × u32) and digest before an entry's key and value.
const ENTRY_HEAD: usize = 8 + DIGEST_LEN;
/// Larger keys or values are not a cranelift entry: the pack is read no further.
const MAX_PART: u32 = 1 << 30;

/// The on-disk function cache, and what it served since the runtime started.
#[derive(Debug)]
pub(crate) struct FunctionCache {
    dir: PathBuf,
    state: Mutex<State>,
    hits: AtomicU64,
    misses: AtomicU64,
    /// Entries that could not be written (a full disk, a read-only folder): compiling goes on.
    failed_writes: AtomicU64,
}

/// Packs kept open at once (each read opens its pack if it is not): a long-lived host that
/// compiled hundreds of guests must not hold hundreds of descriptors.
const MAX_OPEN: usize = 32;

#[derive(Debug, Default)]
struct State {
    /// Every indexed entry: key → its pack (an index into `packs`) and where its head starts.
    index: HashMap<Vec<u8>, (usize, u64)>,
    /// The packs indexed, in the order they were.
    packs: Vec<PathBuf>,
    /// Some of them, open.
    open: HashMap<usize, Arc<File>>,
    /// Packs already indexed, by file name.
    seen: HashSet<OsString>,
    /// Functions compiled since the last [`FunctionCache::flush`]: served from here too, so that
    /// identical functions of one component compile once.
    pending: HashMap<Vec<u8>, Vec<u8>>,
}

/// What the function cache served: lookups that found a compiled function, lookups that did not
/// (the function was compiled and stored), and stores that failed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FunctionCacheStats {
    /// Functions taken from the cache instead of compiled.
    pub hits: u64,
    /// Functions compiled (not in the cache, or an entry that did not match its digest).
    pub misses: u64,
    /// Compiled functions that could not be stored.
    pub failed_writes: u64,
}

impl FunctionCache {
    /// The cache in `dir` (created when the first pack is written), its packs indexed.
    pub(crate) fn new(dir: PathBuf) -> FunctionCache {
        let cache = FunctionCache {
            dir,
            state: Mutex::new(State::default()),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            failed_writes: AtomicU64::new(0),
        };
        cache.refresh();
        cache
    }

    pub(crate) fn stats(&self) -> FunctionCacheStats {
        FunctionCacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            failed_writes: self.failed_writes.load(Ordering::Relaxed),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock leaves a consistent map (every update is one insert).
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Indexes the packs written since the last look (by this runtime or another process).
    pub(crate) fn refresh(&self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return };
        let names: Vec<OsString> = entries
            .filter_map(|e| e.ok())
            .map(|e| e.file_name())
            .filter(|n| Path::new(n).extension().is_some_and(|x| x == "pack"))
            .collect();
        for name in names {
            if self.state().seen.contains(&name) {
                continue;
            }
            let path = self.dir.join(&name);
            let indexed = File::open(&path).and_then(|f| index_pack(&f));
            let mut state = self.state();
            state.seen.insert(name);
            match indexed {
                Ok(entries) => {
                    let pack = state.packs.len();
                    state.packs.push(path);
                    for (key, offset) in entries {
                        state.index.entry(key).or_insert((pack, offset));
                    }
                }
                Err(e) => tracing::debug!("function cache: skipping {}: {e}", path.display()),
            }
        }
    }

    /// Writes the functions compiled since the last flush as one pack, and indexes it.
    pub(crate) fn flush(&self) {
        let pending: Vec<(Vec<u8>, Vec<u8>)> = std::mem::take(&mut self.state().pending).into_iter().collect();
        if pending.is_empty() {
            return;
        }
        let count = pending.len() as u64;
        match self.write_pack(&pending) {
            Ok(name) => {
                let mut state = self.state();
                let pack = state.packs.len();
                state.packs.push(self.dir.join(&name));
                state.seen.insert(name);
                let mut offset = MAGIC.len() as u64;
                for (key, value) in pending {
                    let next = offset + (ENTRY_HEAD + key.len() + value.len()) as u64;
                    state.index.entry(key).or_insert((pack, offset));
                    offset = next;
                }
            }
            Err(e) => {
                if self.failed_writes.fetch_add(count, Ordering::Relaxed) == 0 {
                    // Once per runtime: a full disk would say it for every compile.
                    tracing::warn!(
                        "could not write to the function cache {} (compiling goes on, uncached): {e}",
                        self.dir.display()
                    );
                }
            }
        }
    }

    fn write_pack(&self, entries: &[(Vec<u8>, Vec<u8>)]) -> std::io::Result<OsString> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        std::fs::create_dir_all(&self.dir)?;
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let name = OsString::from(format!("{pid}-{nanos}-{n}.pack"));
        // No fsync: a pack cut short by a crash is a miss (each entry carries its digest).
        crate::files::write_replacing(&self.dir.join(&name), false, |out| {
            out.write_all(MAGIC)?;
            for (key, value) in entries {
                out.write_all(&head(key, value))?;
                out.write_all(key)?;
                out.write_all(value)?;
            }
            Ok(())
        })?;
        Ok(name)
    }

    fn read(&self, key: &[u8]) -> Option<Vec<u8>> {
        let (pack, offset, open) = {
            let state = self.state();
            if let Some(value) = state.pending.get(key) {
                return Some(value.clone());
            }
            let &(pack, offset) = state.index.get(key)?;
            (pack, offset, state.open.get(&pack).cloned().ok_or_else(|| state.packs[pack].clone()))
        };
        let file = match open {
            Ok(file) => file,
            Err(path) => {
                // Deleted since it was indexed (someone cleared the cache): a miss.
                let file = Arc::new(File::open(path).ok()?);
                let mut state = self.state();
                if state.open.len() >= MAX_OPEN
                    && let Some(&evict) = state.open.keys().next()
                {
                    state.open.remove(&evict);
                }
                state.open.insert(pack, file.clone());
                file
            }
        };
        let mut head_bytes = [0; ENTRY_HEAD];
        file.read_exact_at(&mut head_bytes, offset).ok()?;
        let (key_len, value_len) = lengths(&head_bytes)?;
        // A pack replaced or cut since it was indexed must not make us allocate what it claims.
        let end = offset + (ENTRY_HEAD + key_len + value_len) as u64;
        if key_len != key.len() || file.metadata().ok()?.len() < end {
            return None;
        }
        let mut entry = vec![0; key_len + value_len];
        file.read_exact_at(&mut entry, offset + ENTRY_HEAD as u64).ok()?;
        let (stored_key, value) = entry.split_at(key_len);
        if stored_key != key || head(key, value) != head_bytes {
            return None;
        }
        entry.drain(..key_len);
        Some(entry)
    }
}

impl CacheStore for FunctionCache {
    fn get(&self, key: &[u8]) -> Option<Cow<'_, [u8]>> {
        match self.read(key) {
            Some(value) => {
                self.hits.fetch_add(1, Ordering::Relaxed);
                Some(Cow::Owned(value))
            }
            None => {
                self.misses.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    fn insert(&self, key: &[u8], value: Vec<u8>) -> bool {
        self.state().pending.insert(key.to_vec(), value);
        true
    }
}

/// An entry's head: the two lengths, and the SHA-256 of them, the key and the value.
fn head(key: &[u8], value: &[u8]) -> [u8; ENTRY_HEAD] {
    let mut out = [0; ENTRY_HEAD];
    out[..4].copy_from_slice(&(key.len() as u32).to_le_bytes());
    out[4..8].copy_from_slice(&(value.len() as u32).to_le_bytes());
    let mut h = Sha256::new();
    h.update(&out[..8]);
    h.update(key);
    h.update(value);
    out[8..].copy_from_slice(&h.finalize());
    out
}

/// The key and value lengths of an entry's head, if plausible.
fn lengths(head: &[u8; ENTRY_HEAD]) -> Option<(usize, usize)> {
    let key = u32::from_le_bytes(head[..4].try_into().ok()?);
    let value = u32::from_le_bytes(head[4..8].try_into().ok()?);
    (key > 0 && key <= MAX_PART && value <= MAX_PART).then_some((key as usize, value as usize))
}

/// Every entry of a pack: its key, and where its head starts. Stops at the first entry that does
/// not parse or runs past the end (a torn pack); digests are checked when an entry is read.
fn index_pack(file: &File) -> std::io::Result<Vec<(Vec<u8>, u64)>> {
    let size = file.metadata()?.len();
    let mut reader = BufReader::new(file);
    let mut magic = [0; MAGIC.len()];
    reader.read_exact(&mut magic)?;
    if magic != *MAGIC {
        return Err(std::io::Error::other("not a function-cache pack"));
    }
    let mut entries = Vec::new();
    let mut offset = MAGIC.len() as u64;
    let mut head_bytes = [0; ENTRY_HEAD];
    while reader.read_exact(&mut head_bytes).is_ok() {
        let Some((key_len, value_len)) = lengths(&head_bytes) else { break };
        let end = offset + (ENTRY_HEAD + key_len + value_len) as u64;
        if end > size {
            break;
        }
        let mut key = vec![0; key_len];
        reader.read_exact(&mut key)?;
        reader.seek(SeekFrom::Current(value_len as i64))?;
        entries.push((key, offset));
        offset = end;
    }
    Ok(entries)
}

/// Where a runtime with the cache folder `cache_dir` and wasmtime compatibility hash
/// `engine_hash` keeps its functions.
pub(crate) fn dir_in(cache_dir: &Path, engine_hash: u64) -> PathBuf {
    cache_dir.join(format!("functions-{engine_hash:016x}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("percolator-fcache-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    fn packs(dir: &Path) -> Vec<PathBuf> {
        let mut packs: Vec<PathBuf> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
        packs.sort();
        packs
    }

    #[test]
    fn entries_are_served_for_their_key_from_one_pack_per_flush_and_by_other_caches() {
        let dir = temp("entries");
        let cache = FunctionCache::new(dir.clone());
        assert!(cache.get(b"k1").is_none());
        assert!(cache.insert(b"k1", b"compiled one".to_vec()));
        assert!(cache.insert(b"k2", b"compiled two".to_vec()));
        // Before the flush, from memory (identical functions of one component).
        assert_eq!(cache.get(b"k1").as_deref(), Some(&b"compiled one"[..]));
        assert!(!dir.exists(), "nothing written before the flush");
        cache.flush();
        cache.flush(); // nothing pending: no second pack
        assert_eq!(packs(&dir).len(), 1);
        assert_eq!(cache.get(b"k2").as_deref(), Some(&b"compiled two"[..]));
        assert!(cache.insert(b"k3", Vec::new()));
        cache.flush();
        assert_eq!(packs(&dir).len(), 2);

        // Another cache on the folder (a restarted host) reads both packs; a third, opened
        // before a pack was written, sees it after a refresh.
        let other = FunctionCache::new(dir.clone());
        assert_eq!(other.get(b"k1").as_deref(), Some(&b"compiled one"[..]));
        assert_eq!(other.get(b"k3").as_deref(), Some(&b""[..]));
        assert!(other.get(b"k4").is_none());
        assert!(cache.insert(b"k4", b"compiled four".to_vec()));
        cache.flush();
        assert!(other.get(b"k4").is_none());
        other.refresh();
        assert_eq!(other.get(b"k4").as_deref(), Some(&b"compiled four"[..]));
        assert_eq!(cache.stats(), FunctionCacheStats { hits: 2, misses: 1, failed_writes: 0 });
        assert_eq!(other.stats(), FunctionCacheStats { hits: 3, misses: 2, failed_writes: 0 });
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn many_packs_are_served_with_a_bounded_number_open_and_a_deleted_one_is_a_miss() {
        let dir = temp("many");
        let cache = FunctionCache::new(dir.clone());
        let packs_written = MAX_OPEN + 8;
        for i in 0..packs_written {
            cache.insert(format!("k{i}").as_bytes(), format!("v{i}").into_bytes());
            cache.flush();
        }
        assert_eq!(packs(&dir).len(), packs_written);
        let fresh = FunctionCache::new(dir.clone());
        for round in 0..2 {
            for i in 0..packs_written {
                let value = fresh.get(format!("k{i}").as_bytes());
                assert_eq!(value.as_deref(), Some(format!("v{i}").as_bytes()), "k{i}, round {round}");
                assert!(fresh.state().open.len() <= MAX_OPEN);
            }
        }
        for pack in packs(&dir) {
            std::fs::remove_file(pack).unwrap();
        }
        let closed = (0..packs_written)
            .map(|i| format!("k{i}"))
            .find(|k| {
                let state = fresh.state();
                !state.open.contains_key(&state.index[k.as_bytes()].0)
            })
            .unwrap();
        assert!(fresh.get(closed.as_bytes()).is_none(), "a deleted pack served");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_damaged_entry_or_pack_is_a_miss_never_bytes() {
        let dir = temp("damaged");
        let cache = FunctionCache::new(dir.clone());
        for (k, v) in [(&b"k1"[..], &b"first value"[..]), (b"k2", b"second value"), (b"k3", b"third value")] {
            cache.insert(k, v.to_vec());
        }
        cache.flush();
        let pack = packs(&dir).pop().unwrap();
        let whole = std::fs::read(&pack).unwrap();
        let served = |bytes: &[u8]| -> Vec<bool> {
            std::fs::write(&pack, bytes).unwrap();
            let fresh = FunctionCache::new(dir.clone());
            [&b"k1"[..], b"k2", b"k3"].iter().map(|k| fresh.get(k).is_some()).collect()
        };
        assert_eq!(served(&whole), [true, true, true]);
        // Every single byte flipped in turn: the entry holding it (or, in the magic or in a
        // length, the entries from there on) is no longer served, and nothing else is.
        for i in 0..whole.len() {
            let mut bytes = whole.clone();
            bytes[i] ^= 0x40;
            let fresh = {
                std::fs::write(&pack, &bytes).unwrap();
                FunctionCache::new(dir.clone())
            };
            for k in [&b"k1"[..], b"k2", b"k3"] {
                if let Some(v) = fresh.get(k) {
                    let expected = match k {
                        b"k1" => &b"first value"[..],
                        b"k2" => b"second value",
                        _ => b"third value",
                    };
                    assert_eq!(&*v, expected, "byte {i} flipped");
                }
            }
            assert!(fresh.stats().misses >= 1, "byte {i} flipped and every entry still served");
        }
        // Truncated anywhere: the entries before the cut are served, the torn one is not.
        for cut in 0..whole.len() {
            let ok = served(&whole[..cut]);
            assert!(ok.iter().filter(|s| **s).count() < 3, "cut at {cut}");
        }
        assert_eq!(served(b""), [false, false, false]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_folder_that_cannot_be_written_counts_failures_and_serves_nothing_more() {
        let dir = temp("unwritable");
        // A file where the cache folder should be: every pack fails.
        std::fs::write(&dir, b"not a folder").unwrap();
        let cache = FunctionCache::new(dir.clone());
        assert!(cache.insert(b"k", b"v".to_vec()));
        cache.flush();
        assert!(cache.insert(b"j", b"w".to_vec()));
        cache.flush();
        assert!(cache.get(b"k").is_none());
        assert_eq!(cache.stats(), FunctionCacheStats { hits: 0, misses: 1, failed_writes: 2 });
        let _ = std::fs::remove_file(&dir);
    }
}
