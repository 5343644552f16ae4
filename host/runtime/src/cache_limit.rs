//! The compiled-component cache kept under a size: the least recently used components go
//! first.
//!
//! Every build of a guest is a component of its own (its entry is named by the SHA-256 of its
//! bytes), and a compiled Python or JavaScript guest is some 36 MB: a user editing a guest and
//! reloading it a hundred times would otherwise leave gigabytes behind. A component's entry is
//! its `.cwasm` file, the digest beside it (`.cwasm.sha256`) and the hidden lock that its
//! compile took (`.NAME.cwasm.lock`); its age is its file's modification time, which a load
//! from the cache renews. Removing an entry costs at most a compile: a host that has it loaded
//! holds it in memory, and one that looks for it compiles it again (its functions are still in
//! the function cache, `functions-*/`, which is not counted here nor pruned: it grows only by
//! functions no earlier component had).
//!
//! Also removed: what a crash leaves behind, once it is an hour old (a temporary file of a
//! write, a lock without its entry), so that no one writing or compiling now loses it. Only
//! names the cache gives are counted or removed: a folder shared with other files loses none.

use std::collections::HashSet;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// Leftovers younger than this may belong to a write or a compile under way.
const LEFTOVER_AGE: Duration = Duration::from_secs(3600);

/// What one pass of pruning (`Runtime::set_cache_limit`) removed, and what the components kept
/// take.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CachePruned {
    /// Compiled components removed (the least recently used).
    pub components: usize,
    /// Their bytes (component and digest).
    pub bytes: u64,
    /// Temporary files and locks left by a crash, removed.
    pub leftovers: usize,
    /// The bytes of the compiled components left.
    pub kept_bytes: u64,
}

/// Removes the least recently used component entries of the cache folder `dir` until its
/// components take at most `max_bytes`, never one in `keep` (what this runtime loaded), and
/// the leftovers of crashes. An entry that cannot be removed is skipped; an unreadable folder
/// is the error.
pub(crate) fn prune(dir: &Path, max_bytes: u64, keep: &HashSet<PathBuf>) -> io::Result<CachePruned> {
    let now = SystemTime::now();
    let old =
        |m: &std::fs::Metadata| m.modified().is_ok_and(|t| now.duration_since(t).is_ok_and(|a| a >= LEFTOVER_AGE));
    let mut components = Vec::new();
    let mut locks = Vec::new();
    let mut pruned = CachePruned::default();
    for entry in std::fs::read_dir(dir)? {
        let Ok(entry) = entry else { continue };
        let path = entry.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else { continue };
        let Ok(meta) = entry.metadata() else { continue };
        if !meta.is_file() {
            continue;
        }
        // Only names the cache gives (a folder shared with other files loses none of them).
        let hidden = name.strip_prefix('.').unwrap_or("");
        if hidden.strip_suffix(".lock").is_some_and(is_entry_name) {
            locks.push((path, meta));
        } else if hidden.split_once(".tmp-").is_some_and(|(n, _)| is_entry_name(n.strip_suffix(".sha256").unwrap_or(n)))
        {
            if old(&meta) && std::fs::remove_file(&path).is_ok() {
                pruned.leftovers += 1;
            }
        } else if is_entry_name(name) {
            let digest = std::fs::metadata(crate::runtime::sha_path(&path)).map(|m| m.len()).unwrap_or(0);
            components.push((meta.modified().unwrap_or(SystemTime::UNIX_EPOCH), meta.len() + digest, path));
        }
    }
    let mut total: u64 = components.iter().map(|(_, len, _)| len).sum();
    // Oldest first (ties by name, so a pass is repeatable).
    components.sort();
    let mut removed = HashSet::new();
    for (_, len, path) in components {
        if total <= max_bytes {
            break;
        }
        if keep.contains(&path) || std::fs::remove_file(&path).is_err() {
            continue;
        }
        let _ = std::fs::remove_file(crate::runtime::sha_path(&path));
        total -= len;
        pruned.components += 1;
        pruned.bytes += len;
        removed.insert(path);
    }
    // A lock goes with its removed entry, or once it is old and its entry is gone (a compile
    // that failed or crashed). Taking a lock a compile holds only lets a second host compile
    // the same component beside it, which the cache survives (whole writes, renamed).
    for (lock, meta) in locks {
        let entry = lock.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_prefix('.')?.strip_suffix(".lock"));
        let Some(entry) = entry.map(|e| dir.join(e)) else { continue };
        if (removed.contains(&entry) || (!entry.exists() && old(&meta))) && std::fs::remove_file(&lock).is_ok() {
            pruned.leftovers += 1;
        }
    }
    pruned.kept_bytes = total;
    Ok(pruned)
}

/// `<SHA-256 of the file>-<engine hash>.cwasm`, as the runtime names a compiled component.
fn is_entry_name(name: &str) -> bool {
    let hex =
        |s: &str, len: usize| s.len() == len && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    name.strip_suffix(".cwasm")
        .and_then(|stem| stem.split_once('-'))
        .is_some_and(|(source, engine)| hex(source, 64) && hex(engine, 16))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A component entry named as the runtime names them, after `tag` (a–d).
    fn entry(dir: &Path, tag: &str, len: usize, age_s: u64) -> PathBuf {
        let name = format!("{}-{}.cwasm", tag.repeat(64), "0".repeat(16));
        let path = dir.join(&name);
        std::fs::write(&path, vec![7u8; len]).unwrap();
        std::fs::write(crate::runtime::sha_path(&path), "0".repeat(64)).unwrap();
        std::fs::write(dir.join(format!(".{name}.lock")), "").unwrap();
        aged(&path, age_s);
        path
    }

    fn aged(path: &Path, age_s: u64) {
        let t = SystemTime::now() - Duration::from_secs(age_s);
        std::fs::File::options().write(true).open(path).unwrap().set_modified(t).unwrap();
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut n: Vec<String> =
            std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        n.sort();
        n
    }

    #[test]
    fn the_least_recently_used_components_go_first_and_kept_ones_stay() {
        let dir = std::env::temp_dir().join(format!("percolator-cache-limit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("functions-00")).unwrap();
        std::fs::write(dir.join("functions-00/1-2-3.pack"), vec![0u8; 5000]).unwrap();
        let oldest = entry(&dir, "a", 1000, 400);
        let kept = entry(&dir, "b", 1000, 300);
        entry(&dir, "c", 1000, 200);
        entry(&dir, "d", 1000, 100);
        // Leftovers: an old temporary file and an old lock without its entry go, young ones stay.
        let long = |tag: &str| format!("{}-{}.cwasm", tag.repeat(64), "0".repeat(16));
        let leftover = |name: String, age_s: u64| {
            std::fs::write(dir.join(&name), "part").unwrap();
            aged(&dir.join(&name), age_s);
        };
        leftover(format!(".{}.tmp-1-0", long("e")), 7200);
        leftover(format!(".{}.sha256.tmp-1-1", long("e")), 7200);
        leftover(format!(".{}.tmp-1-2", long("f")), 0);
        leftover(format!(".{}.lock", long("9")), 7200);
        leftover(format!(".{}.lock", long("8")), 0);
        // Old files the cache did not name stay (a folder shared with others).
        for other in [".notes.lock", ".report.tmp-1", "notes.txt", "mine.cwasm"] {
            std::fs::write(dir.join(other), "mine").unwrap();
            aged(&dir.join(other), 7200);
        }

        // Each entry is 1,064 bytes with its digest: two fit in 2,200, and `b` is kept though
        // it is older than `c`.
        let keep = HashSet::from([kept.clone()]);
        let pruned = prune(&dir, 2200, &keep).unwrap();
        assert_eq!(pruned, CachePruned { components: 2, bytes: 2128, leftovers: 5, kept_bytes: 2128 });
        let mut expected = vec![
            format!(".{}.lock", long("b")),
            format!(".{}.lock", long("d")),
            format!(".{}.tmp-1-2", long("f")),
            format!(".{}.lock", long("8")),
            ".notes.lock".to_owned(),
            ".report.tmp-1".to_owned(),
            long("b"),
            format!("{}.sha256", long("b")),
            long("d"),
            format!("{}.sha256", long("d")),
            "functions-00".to_owned(),
            "mine.cwasm".to_owned(),
            "notes.txt".to_owned(),
        ];
        expected.sort();
        assert_eq!(names(&dir), expected);
        assert!(!oldest.exists());
        // Under the limit: nothing more goes.
        assert_eq!(
            prune(&dir, 2200, &HashSet::new()).unwrap(),
            CachePruned { kept_bytes: 2128, ..CachePruned::default() }
        );
        // A limit of nothing: every component not kept.
        let pruned = prune(&dir, 0, &keep).unwrap();
        assert_eq!((pruned.components, pruned.kept_bytes), (1, 1064));
        assert!(kept.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_missing_folder_is_the_error() {
        let e = prune(Path::new("/nonexistent/percolator-cache"), 0, &HashSet::new()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
    }
}
