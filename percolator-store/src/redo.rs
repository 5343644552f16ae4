//! The redo log in front of redb (`docs/design.md`, "A redo log in front of redb").
//!
//! At durability fsync a group-commit round is made durable by appending one record of the
//! key-level changes it made to `<store>.redo` and fdatasyncing that append; redb then commits
//! the round without writing or syncing its pages. A checkpoint (a durable redb commit that
//! also writes `redo/applied`) empties the log every second or [`CHECKPOINT_BYTES`]; opening
//! the store replays the records after the last checkpoint.
//!
//! A record: `len: u32 ‖ crc32: u32 ‖ seq: u64 ‖ changes`, little-endian, where `len` counts
//! the bytes after the crc (`seq` and `changes`) and the crc covers them. A change:
//! `tag: u8 ‖ key_len: u32 ‖ key` then, for a put, `value_len: u32 ‖ value`; `tag` is the
//! table's number times two, plus one for a put.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// The metadata key of the checkpoint: the `seq` of the last record whose round redb holds
/// durably (8 bytes, big-endian).
pub(crate) const APPLIED_KEY: &str = "redo/applied";

/// A checkpoint is due once this many bytes were logged since the last one.
pub(crate) const CHECKPOINT_BYTES: u64 = 64 << 20;
/// A checkpoint is due once the last one is this old (when a round comes), by default.
pub(crate) const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);

/// A record's header: `len` and `crc32`.
const HEADER: usize = 8;
/// The largest record a reader accepts (a round is bounded by the group commit's 4,096 ops;
/// a row of cells of at most a few MiB each): anything larger is a damaged length.
const MAX_RECORD: u64 = 1 << 34;

/// The tables a change names, by number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Table {
    Cells = 0,
    Notify = 1,
    Meta = 2,
}

impl Table {
    fn from_tag(tag: u8) -> Option<Table> {
        match tag >> 1 {
            0 => Some(Table::Cells),
            1 => Some(Table::Notify),
            2 => Some(Table::Meta),
            _ => None,
        }
    }
}

/// One key-level change of a round, as read back.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Change<'a> {
    Put(Table, &'a [u8], &'a [u8]),
    Delete(Table, &'a [u8]),
}

/// The changes of one round, encoded as they are made.
#[derive(Default)]
pub(crate) struct Changes {
    buf: Vec<u8>,
}

impl Changes {
    pub(crate) fn put(&mut self, table: Table, key: &[u8], value: &[u8]) {
        self.buf.push((table as u8) << 1 | 1);
        put_bytes(&mut self.buf, key);
        put_bytes(&mut self.buf, value);
    }

    pub(crate) fn delete(&mut self, table: Table, key: &[u8]) {
        self.buf.push((table as u8) << 1);
        put_bytes(&mut self.buf, key);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
}

fn put_bytes(buf: &mut Vec<u8>, bytes: &[u8]) {
    buf.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    buf.extend_from_slice(bytes);
}

/// Decodes a record's changes; `None` if they do not parse (a record whose crc matched but
/// whose content does not parse was written by something else).
pub(crate) fn decode(mut changes: &[u8]) -> Option<Vec<Change<'_>>> {
    fn take<'a>(b: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        if b.len() < n {
            return None;
        }
        let (head, rest) = b.split_at(n);
        *b = rest;
        Some(head)
    }
    fn bytes<'a>(b: &mut &'a [u8]) -> Option<&'a [u8]> {
        let n = u32::from_le_bytes(take(b, 4)?.try_into().ok()?) as usize;
        take(b, n)
    }
    let mut out = Vec::new();
    while let Some(&tag) = changes.first() {
        changes = &changes[1..];
        let table = Table::from_tag(tag)?;
        let key = bytes(&mut changes)?;
        out.push(if tag & 1 == 1 { Change::Put(table, key, bytes(&mut changes)?) } else { Change::Delete(table, key) });
    }
    Some(out)
}

/// One record read back from the log.
pub(crate) struct Record {
    pub(crate) seq: u64,
    pub(crate) changes: Vec<u8>,
}

/// The open log: appended by the group commit's leader (one at a time), read at open.
pub(crate) struct RedoLog {
    file: File,
    path: PathBuf,
    /// Where the next record goes: the end of the last whole record.
    len: u64,
    /// The `seq` of the next record.
    next_seq: u64,
    /// Bytes appended since the last checkpoint.
    since_checkpoint_bytes: u64,
    last_checkpoint: Instant,
    checkpoint_every: Duration,
    /// A checkpoint is due whatever the clock says (after a reopen, whose replay was not
    /// durable).
    checkpoint_forced: bool,
}

/// The log's path beside the store's file: `<store>.redo`.
pub(crate) fn path_of(store: &Path) -> PathBuf {
    let mut name = store.as_os_str().to_owned();
    name.push(".redo");
    PathBuf::from(name)
}

impl RedoLog {
    /// Opens (or creates) the log of the store at `store` and reads its whole records after
    /// `applied`, in order. A torn tail — a last record cut short, or zeros where the file was
    /// extended but not written — ends the log there (its round's fsync never returned, so no
    /// caller of it was answered; it is cut off before anything is appended). A damaged record
    /// followed by more data is not a torn tail: an error naming the file and offset (a
    /// record after it may have been acknowledged).
    ///
    /// `durable_len`: at a reopen after a failure, the end of the last record whose fsync
    /// returned (what this process's log knew to be durable); anything after it — a record
    /// whose append or fsync failed, whose callers heard an error — is cut off unread, so that
    /// no reader sees a round the disk may not hold.
    pub(crate) fn open(
        store: &Path,
        applied: u64,
        checkpoint_every: Duration,
        durable_len: Option<u64>,
    ) -> Result<(RedoLog, Vec<Record>)> {
        let path = path_of(store);
        let io = |e: std::io::Error| Error::io(&path, &e);
        let mut file =
            OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&path).map_err(io)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(io)?;
        if let Some(durable) = durable_len {
            bytes.truncate(durable.min(bytes.len() as u64) as usize);
        }
        let file_len = file.metadata().map_err(io)?.len();
        let mut records = Vec::new();
        let mut at = 0usize;
        let mut last_seq = applied;
        while at < bytes.len() {
            let whole = parse_record(&bytes[at..]);
            let Some((record, size)) = whole else {
                let rest = &bytes[at..];
                let torn = rest.len() < HEADER
                    || rest.iter().all(|b| *b == 0)
                    || declared_size(rest).is_none_or(|size| size >= rest.len() as u64);
                if torn {
                    break;
                }
                return Err(Error::Storage(format!(
                    "{}: the redo log is damaged at byte {at} (a record that does not check out, with {} bytes after \
                     it): not opening the store, since a later record may hold commits that were acknowledged; to \
                     open the store without the commits this log holds (those of about the last second before the \
                     process stopped), move the file aside",
                    path.display(),
                    rest.len()
                )));
            };
            if record.seq > last_seq {
                last_seq = record.seq;
                records.push(record);
            }
            at += size;
        }
        if (at as u64) < file_len {
            // Cut the torn tail off, durably, so that appends follow the last whole record.
            file.set_len(at as u64).map_err(io)?;
            file.sync_data().map_err(io)?;
        }
        let log = RedoLog {
            file,
            path,
            len: at as u64,
            next_seq: last_seq + 1,
            since_checkpoint_bytes: at as u64,
            last_checkpoint: Instant::now(),
            checkpoint_every,
            checkpoint_forced: false,
        };
        Ok((log, records))
    }

    /// Appends one round's record and fdatasyncs it. On an error nothing is promised about
    /// the record (it may be whole, torn, or absent): the caller fails the round and has the
    /// store reopened, which reads the log again from the start.
    pub(crate) fn append(&mut self, changes: &Changes) -> Result<u64> {
        let seq = self.next_seq;
        let body_len = 8 + changes.buf.len();
        let mut record = Vec::with_capacity(HEADER + body_len);
        record.extend_from_slice(&(body_len as u32).to_le_bytes());
        record.extend_from_slice(&[0; 4]);
        record.extend_from_slice(&seq.to_le_bytes());
        record.extend_from_slice(&changes.buf);
        let crc = crc32fast::hash(&record[HEADER..]);
        record[4..8].copy_from_slice(&crc.to_le_bytes());
        let io = |e: std::io::Error| Error::io(&self.path, &e);
        self.file.write_all_at(&record, self.len).map_err(io)?;
        // A failpoint's "return" stands for an fsync that failed after the write.
        fail::fail_point!("redo-after-append", |_| Err(Error::Io {
            path: self.path.clone(),
            message: "failpoint redo-after-append".into(),
            disk_full: false,
        }));
        self.file.sync_data().map_err(io)?;
        fail::fail_point!("redo-after-fsync");
        self.len += record.len() as u64;
        self.next_seq += 1;
        self.since_checkpoint_bytes += record.len() as u64;
        Ok(seq)
    }

    /// The `seq` of the last record appended (or replayed): what a checkpoint writes.
    pub(crate) fn last_seq(&self) -> u64 {
        self.next_seq - 1
    }

    /// A checkpoint is due (`checkpoint_every` since the last, [`CHECKPOINT_BYTES`] logged
    /// since, or forced).
    pub(crate) fn checkpoint_due(&self) -> bool {
        self.checkpoint_forced
            || self.since_checkpoint_bytes >= CHECKPOINT_BYTES
            || (self.len > 0 && self.last_checkpoint.elapsed() >= self.checkpoint_every)
    }

    /// Nothing is in the log.
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The end of the last record whose fsync returned.
    pub(crate) fn durable_len(&self) -> u64 {
        self.len
    }

    /// Makes the next round a checkpoint.
    pub(crate) fn force_checkpoint(&mut self) {
        self.checkpoint_forced = true;
    }

    /// After a durable redb commit holding `redo/applied = last_seq()`: empties the log. If
    /// that fails the records stay (a later open skips them: their `seq` is not above
    /// `redo/applied`), and so does the checkpoint's due state.
    pub(crate) fn checkpointed(&mut self) -> Result<()> {
        fail::fail_point!("redo-checkpoint-before-truncate");
        if self.len > 0 {
            let io = |e: std::io::Error| Error::io(&self.path, &e);
            self.file.set_len(0).map_err(io)?;
            self.file.sync_data().map_err(io)?;
            self.len = 0;
        }
        self.since_checkpoint_bytes = 0;
        self.last_checkpoint = Instant::now();
        self.checkpoint_forced = false;
        Ok(())
    }

    /// Removes the (empty) log file, at a clean close after a checkpoint.
    pub(crate) fn remove(self) {
        if self.len == 0 {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// The size a record at the start of `bytes` declares, if its header is there.
fn declared_size(bytes: &[u8]) -> Option<u64> {
    let len = u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?) as u64;
    Some(HEADER as u64 + len)
}

/// The whole, checked record at the start of `bytes` and its size, or `None`.
fn parse_record(bytes: &[u8]) -> Option<(Record, usize)> {
    let size = declared_size(bytes)?;
    if size > MAX_RECORD || size > bytes.len() as u64 || size < (HEADER + 8) as u64 {
        return None;
    }
    let size = size as usize;
    let crc = u32::from_le_bytes(bytes[4..8].try_into().ok()?);
    let body = &bytes[HEADER..size];
    if crc32fast::hash(body) != crc {
        return None;
    }
    let seq = u64::from_le_bytes(body[..8].try_into().ok()?);
    decode(&body[8..])?;
    Some((Record { seq, changes: body[8..].to_vec() }, size))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "percolator-redo-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn round(n: u8) -> Changes {
        let mut c = Changes::default();
        c.put(Table::Cells, &[n; 3], &[n; 40]);
        c.delete(Table::Notify, b"gone");
        c.put(Table::Meta, b"m", b"");
        c
    }

    #[test]
    fn records_read_back_in_order_after_applied() {
        let store = dir().join("s.redb");
        let (mut log, none) = RedoLog::open(&store, 0, CHECKPOINT_EVERY, None).unwrap();
        assert!(none.is_empty());
        for n in 1..=4 {
            assert_eq!(log.append(&round(n)).unwrap(), n as u64);
        }
        drop(log);
        let (log, records) = RedoLog::open(&store, 2, CHECKPOINT_EVERY, None).unwrap();
        assert_eq!(records.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![3, 4]);
        assert_eq!(log.last_seq(), 4);
        let changes = decode(&records[0].changes).unwrap();
        assert_eq!(
            changes,
            vec![
                Change::Put(Table::Cells, &[3; 3], &[3; 40]),
                Change::Delete(Table::Notify, b"gone"),
                Change::Put(Table::Meta, b"m", b""),
            ]
        );
    }

    /// A torn last record (cut short, or zeros where the file grew) ends the log: it is cut
    /// off, and the next append follows the last whole record and reads back.
    #[test]
    fn a_torn_tail_is_cut_off_and_appends_follow_the_last_whole_record() {
        for tear in ["short", "zeros", "bad crc at the end"] {
            let store = dir().join(format!("{}.redb", tear.replace(' ', "_")));
            let (mut log, _) = RedoLog::open(&store, 0, CHECKPOINT_EVERY, None).unwrap();
            log.append(&round(1)).unwrap();
            log.append(&round(2)).unwrap();
            let whole = std::fs::metadata(path_of(&store)).unwrap().len();
            drop(log);
            let f = OpenOptions::new().write(true).open(path_of(&store)).unwrap();
            match tear {
                "short" => f.set_len(whole - 5).unwrap(),
                "zeros" => f.set_len(whole + 4096).unwrap(),
                _ => f.write_all_at(&[0xff], whole - 1).unwrap(),
            }
            let (mut log, records) = RedoLog::open(&store, 0, CHECKPOINT_EVERY, None).unwrap();
            let expected: &[u64] = if tear == "zeros" { &[1, 2] } else { &[1] };
            assert_eq!(records.iter().map(|r| r.seq).collect::<Vec<_>>(), expected, "{tear}");
            let seq = log.append(&round(9)).unwrap();
            drop(log);
            let (_, records) = RedoLog::open(&store, 0, CHECKPOINT_EVERY, None).unwrap();
            assert_eq!(records.last().map(|r| r.seq), Some(seq), "{tear}: the append after the tear reads back");
        }
    }

    /// A damaged record with whole records after it is not a torn tail: opening fails, naming
    /// the file and the offset, rather than dropping what follows.
    #[test]
    fn a_damaged_record_in_the_middle_fails_the_open() {
        let store = dir().join("s.redb");
        let (mut log, _) = RedoLog::open(&store, 0, CHECKPOINT_EVERY, None).unwrap();
        log.append(&round(1)).unwrap();
        log.append(&round(2)).unwrap();
        drop(log);
        let f = OpenOptions::new().write(true).open(path_of(&store)).unwrap();
        f.write_all_at(&[0xee], 20).unwrap();
        let e = RedoLog::open(&store, 0, CHECKPOINT_EVERY, None)
            .err()
            .expect("a damaged record fails the open")
            .to_string();
        assert!(e.contains("s.redb.redo") && e.contains("byte 0"), "{e}");
    }

    /// At a reopen, what follows the last record whose fsync returned is cut off unread, even
    /// a whole record (its fsync failed: nobody was told it committed).
    #[test]
    fn a_reopen_reads_only_up_to_the_last_fsynced_record() {
        let store = dir().join("s.redb");
        let (mut log, _) = RedoLog::open(&store, 0, CHECKPOINT_EVERY, None).unwrap();
        log.append(&round(1)).unwrap();
        let durable = log.durable_len();
        log.append(&round(2)).unwrap(); // stands for a record whose fsync failed
        drop(log);
        let (log, records) = RedoLog::open(&store, 0, CHECKPOINT_EVERY, Some(durable)).unwrap();
        assert_eq!(records.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![1]);
        assert_eq!((log.last_seq(), log.durable_len()), (1, durable));
        assert_eq!(std::fs::metadata(path_of(&store)).unwrap().len(), durable, "the rest is cut off");
    }

    #[test]
    fn a_checkpoint_empties_the_log_and_seq_goes_on() {
        let store = dir().join("s.redb");
        let (mut log, _) = RedoLog::open(&store, 0, CHECKPOINT_EVERY, None).unwrap();
        log.append(&round(1)).unwrap();
        log.checkpointed().unwrap();
        assert_eq!(std::fs::metadata(path_of(&store)).unwrap().len(), 0);
        assert_eq!(log.append(&round(2)).unwrap(), 2);
        drop(log);
        let (log, records) = RedoLog::open(&store, 1, CHECKPOINT_EVERY, None).unwrap();
        assert_eq!(records.iter().map(|r| r.seq).collect::<Vec<_>>(), vec![2]);
        assert_eq!(log.last_seq(), 2);
    }
}
