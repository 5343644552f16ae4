//! Writing a file whole or not at all, and locking one for work that is better done once.

use std::fs::{File, TryLockError};
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Writes `target` through a temporary file beside it (`.NAME.tmp-PID-N`: hidden, and no
/// cache's suffix) and a rename, so a reader finds the old file or the whole new one, never a
/// part. `write` fills the temporary file through a buffer; with `sync` it is fsynced before
/// the rename. On any error the temporary file is removed and `target` is left as it was.
pub(crate) fn write_replacing(
    target: &Path,
    sync: bool,
    write: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> io::Result<()> {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let tmp = hidden_beside(target, &format!(".tmp-{}-{}", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed)))
        .ok_or_else(|| io::Error::other(format!("{} names no file", target.display())))?;
    let written = (|| {
        let mut out = BufWriter::new(File::options().write(true).create_new(true).open(&tmp)?);
        write(&mut out)?;
        let file = out.into_inner().map_err(|e| e.into_error())?;
        if sync {
            file.sync_all()?;
        }
        std::fs::rename(&tmp, target)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// An exclusive lock beside `target` (the file `.NAME.lock`, left in place), held until the
/// returned file is dropped: across processes (`flock`) and between threads of one process
/// alike. Waits for another holder at most `wait`, then gives up with `None`, as it does
/// where the lock file cannot be made (a read-only folder, a file system without locks): the
/// lock only saves work done twice, never guards correctness.
pub(crate) fn lock_beside(target: &Path, wait: Duration) -> Option<File> {
    let file = File::options().write(true).create(true).truncate(false).open(hidden_beside(target, ".lock")?).ok()?;
    let deadline = Instant::now() + wait;
    loop {
        match file.try_lock() {
            Ok(()) => return Some(file),
            Err(TryLockError::WouldBlock) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Err(_) => return None,
        }
    }
}

/// `.NAME<suffix>` beside `target` (hidden, and without the suffix of what lives there); `None`
/// if `target` names no file.
fn hidden_beside(target: &Path, suffix: &str) -> Option<std::path::PathBuf> {
    let mut name = std::ffi::OsString::from(".");
    name.push(target.file_name()?);
    name.push(suffix);
    Some(target.with_file_name(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_write_leaves_the_old_file_and_no_temporary_one() {
        let dir = std::env::temp_dir().join(format!("percolator-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("a.bin");
        write_replacing(&target, true, |w| w.write_all(b"old")).unwrap();
        let e = write_replacing(&target, false, |w| {
            w.write_all(b"half")?;
            Err(io::Error::other("the writer failed"))
        })
        .unwrap_err();
        assert_eq!(e.to_string(), "the writer failed");
        assert_eq!(std::fs::read(&target).unwrap(), b"old");
        write_replacing(&target, false, |w| w.write_all(b"new")).unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"new");
        let names: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["a.bin"], "a temporary file left behind");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_lock_beside_a_file_waits_for_its_holder_or_gives_up() {
        let dir = std::env::temp_dir().join(format!("percolator-files-lock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("entry.cwasm");
        let held = lock_beside(&target, Duration::ZERO).expect("a free lock");
        // Held (by another open file: as another process would hold it): a second taker gives
        // up after its wait.
        let started = Instant::now();
        assert!(lock_beside(&target, Duration::from_millis(100)).is_none(), "a held lock taken");
        assert!(started.elapsed() >= Duration::from_millis(100), "gave up before its wait");
        // Released while the second waits: it gets the lock.
        let releaser = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            drop(held);
        });
        assert!(lock_beside(&target, Duration::from_secs(10)).is_some(), "a released lock not taken");
        releaser.join().unwrap();
        // No lock where none can be made: the caller goes on without.
        assert!(lock_beside(&dir.join("missing/entry.cwasm"), Duration::ZERO).is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
