//! The redo log in front of redb (`docs/design.md`, "A redo log in front of redb" and "A
//! memtable in front of redb").
//!
//! At durability fsync a group-commit round is made durable by appending one record of the
//! key-level changes it made and fdatasyncing that append, before the round is published to
//! the memtable. The log is two files, `<store>.redo` and `<store>.redo.1`, that take turns: a
//! checkpoint's freeze makes the other file current ([`RedoLog::turn`]), and once the
//! checkpoint (a durable redb commit that also writes `redo/applied`) is done the file that
//! held its rounds is emptied ([`RedoLog::retire`]); opening the store replays the records of
//! both after the last checkpoint.
//!
//! Each file starts with a header, `"PRCLREDO" ‖ store id: u64`: the id is the store file's
//! (meta `redo/store_id`, made at its first open), so a log is never replayed into another
//! store file. Then records: `len: u32 ‖ crc32: u32 ‖ seq: u64 ‖ changes`, little-endian,
//! where `len` counts the bytes after the crc (`seq` and `changes`) and the crc covers them;
//! `seq`s are consecutive. A change:
//! `tag: u8 ‖ key_len: u32 ‖ key` then, for a put, `value_len: u32 ‖ value`; `tag` is the
//! table's number times two, plus one for a put.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The metadata key of the checkpoint: the `seq` of the last record whose round redb holds
/// durably (8 bytes, big-endian).
pub(crate) const APPLIED_KEY: &str = "redo/applied";
/// The metadata key of the store file's id, which its log's header repeats (8 bytes).
pub(crate) const STORE_ID_KEY: &str = "redo/store_id";

/// The log file's header: magic and the store's id.
const MAGIC: &[u8; 8] = b"PRCLREDO";
const FILE_HEADER: u64 = 16;

/// A record's header: `len` and `crc32`.
const HEADER: usize = 8;

/// The tables a change names, by number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Table {
    Cells = 0,
    Notify = 1,
    Meta = 2,
}

impl Table {
    /// Every table, by number.
    pub(crate) const ALL: [Table; 3] = [Table::Cells, Table::Notify, Table::Meta];

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
    /// A key or value too long for the record's 32-bit lengths (the round then fails).
    too_long: Option<usize>,
}

impl Changes {
    pub(crate) fn put(&mut self, table: Table, key: &[u8], value: &[u8]) {
        self.buf.push((table as u8) << 1 | 1);
        self.bytes(key);
        self.bytes(value);
    }

    pub(crate) fn delete(&mut self, table: Table, key: &[u8]) {
        self.buf.push((table as u8) << 1);
        self.bytes(key);
    }

    fn bytes(&mut self, bytes: &[u8]) {
        match u32::try_from(bytes.len()) {
            Ok(n) => {
                self.buf.extend_from_slice(&n.to_le_bytes());
                self.buf.extend_from_slice(bytes);
            }
            Err(_) => self.too_long = Some(bytes.len()),
        }
    }
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

/// One of the log's two files.
struct Segment {
    file: File,
    path: PathBuf,
    /// The end of its last whole record (where the next one goes).
    len: u64,
}

impl Segment {
    fn is_empty(&self) -> bool {
        self.len <= FILE_HEADER
    }

    /// Cuts the file back to `len` (off a record that failed) and syncs the cut.
    fn cut(&mut self, len: u64) -> Result<()> {
        let io = |e: std::io::Error| Error::io(&self.path, &e);
        self.file.set_len(len).map_err(io)?;
        self.file.sync_data().map_err(io)?;
        self.len = len;
        Ok(())
    }
}

/// The open log: appended by the group commit's leader (one round at a time), turned over by
/// the checkpointer between rounds, read at open. Two files take turns
/// (`docs/design.md`, "A memtable in front of redb", 4.): appends go to the current one; a
/// checkpoint's freeze makes the other current, and once the checkpoint is durable the file
/// that held its rounds is emptied.
pub(crate) struct RedoLog {
    /// `[current, other]`.
    segments: [Segment; 2],
    /// The `seq` of the next record.
    next_seq: u64,
    /// An append failed and its bytes could not be cut off again: no record is appended
    /// until [`RedoLog::repair`] has cut them.
    broken: bool,
}

/// The log's files beside the store's file: `<store>.redo` and `<store>.redo.1`.
pub(crate) fn paths_of(store: &Path) -> [PathBuf; 2] {
    let mut first = store.as_os_str().to_owned();
    first.push(".redo");
    let mut second = first.clone();
    second.push(".1");
    [PathBuf::from(first), PathBuf::from(second)]
}

/// The log's first file, `<store>.redo`.
pub(crate) fn path_of(store: &Path) -> PathBuf {
    let [first, _] = paths_of(store);
    first
}

/// Makes the entries of the directory holding `path` durable (a file created or renamed into it).
pub(crate) fn sync_dir_of(path: &Path) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    File::open(dir).and_then(|d| d.sync_all()).map_err(|e| Error::io(dir, &e))
}

/// Whether the store at `store` has log files beside it.
pub(crate) fn exists(store: &Path) -> bool {
    paths_of(store).iter().any(|p| p.exists())
}

/// Opens (or creates) one of the log's files, checks its header, and reads its whole records
/// in order; cuts off what follows the last of them.
fn open_segment(path: PathBuf, store: &Path, store_id: u64) -> Result<(Segment, Vec<Record>)> {
    let io = |e: std::io::Error| Error::io(&path, &e);
    let created = !path.exists();
    let mut file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&path).map_err(io)?;
    if created {
        // The new file's name must be durable with its first record's fsync.
        sync_dir_of(&path)?;
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).map_err(io)?;
    let header_whole = bytes.len() as u64 >= FILE_HEADER;
    if !header_whole || bytes[..FILE_HEADER as usize].iter().all(|b| *b == 0) {
        if bytes.iter().any(|b| *b != 0) && header_whole {
            return Err(Error::Storage(format!(
                "{}: the redo log's header is zeros but records follow: not a log this store wrote; move it \
                 aside to open {}",
                path.display(),
                store.display()
            )));
        }
        // New, or its header never reached the disk (so no record was ever acknowledged).
        let mut header = MAGIC.to_vec();
        header.extend_from_slice(&store_id.to_le_bytes());
        file.set_len(0).map_err(io)?;
        file.write_all_at(&header, 0).map_err(io)?;
        file.sync_data().map_err(io)?;
        bytes = header;
    }
    if &bytes[..8] != MAGIC {
        return Err(Error::Storage(format!(
            "{}: not a redo log (no PRCLREDO header): move it aside to open {}",
            path.display(),
            store.display()
        )));
    }
    let logged_for = u64::from_le_bytes(bytes[8..16].try_into().expect("16-byte header"));
    if logged_for != store_id {
        return Err(Error::Storage(format!(
            "{}: this redo log belongs to another store file (store id {logged_for:016x}; {} has {store_id:016x}): \
             not replaying it there; if that store is gone, delete the log",
            path.display(),
            store.display()
        )));
    }
    let mut records: Vec<Record> = Vec::new();
    let mut at = FILE_HEADER as usize;
    while at < bytes.len() {
        let Some((record, size)) = parse_record(&bytes[at..]) else {
            break;
        };
        if let Some(p) = records.last().map(|r| r.seq)
            && record.seq != p + 1
        {
            return Err(Error::Storage(format!(
                "{}: record {} follows record {p} at byte {at}: the log is not one this store wrote in order",
                path.display(),
                record.seq
            )));
        }
        records.push(record);
        at += size;
    }
    if at < bytes.len() {
        tracing::warn!(
            log = %path.display(),
            at,
            cut = bytes.len() - at,
            records = records.len(),
            "the redo log ends in a record that does not check out (a crash mid-append): cut off there"
        );
        file.set_len(at as u64).map_err(io)?;
        file.sync_data().map_err(io)?;
    }
    Ok((Segment { file, path, len: at as u64 }, records))
}

impl RedoLog {
    /// Opens (or creates) the log of the store at `store` (whose id is `store_id`) and reads
    /// the records after `applied` from both its files, in order. In each file the first record
    /// that does not check out (cut short, zeros where the file grew, a bad crc) ends that file,
    /// and it is cut off there before anything is appended — as PostgreSQL's WAL replay ends at
    /// its first invalid record: a record is appended only after the one before it was
    /// fsynced, and its callers answered only after its own fsync, so after a crash or a power
    /// loss only the last record of the current file can be bad and it was never acknowledged
    /// (a disk that damages synced bytes is out of its reach; the cut is logged). Refused,
    /// naming the files: a log of another store file, and records whose `seq`s do not follow
    /// on from `applied` or from one another (a store file restored from an older copy beside
    /// a newer log).
    pub(crate) fn open(store: &Path, applied: u64, store_id: u64) -> Result<(RedoLog, Vec<Record>)> {
        let [first, second] = paths_of(store);
        let (a, mut a_records) = open_segment(first, store, store_id)?;
        let (b, mut b_records) = open_segment(second, store, store_id)?;
        // The file whose records come later is the current one (an empty file comes first).
        let b_later = match (a_records.first(), b_records.first()) {
            (Some(x), Some(y)) => y.seq > x.seq,
            (None, Some(_)) => true,
            _ => false,
        };
        let (segments, mut records) = if b_later {
            a_records.append(&mut b_records);
            ([b, a], a_records)
        } else {
            b_records.append(&mut a_records);
            ([a, b], b_records)
        };
        let at_turn = records.windows(2).position(|w| w[1].seq != w[0].seq + 1);
        if let Some(i) = at_turn {
            return Err(Error::Storage(format!(
                "{} and {}: record {} follows record {}: the log's files are not ones this store wrote in turn",
                segments[1].path.display(),
                segments[0].path.display(),
                records[i + 1].seq,
                records[i].seq
            )));
        }
        records.retain(|r| r.seq > applied);
        if let Some(first) = records.first()
            && first.seq != applied + 1
        {
            return Err(Error::Storage(format!(
                "{}: its first record after the store's checkpoint is {}, where {} has reached {applied}: the store \
                 file is older than the log (restored from a copy?); not replaying",
                segments[0].path.display(),
                first.seq,
                store.display()
            )));
        }
        let last_seq = records.last().map_or(applied, |r| r.seq);
        Ok((RedoLog { segments, next_seq: last_seq + 1, broken: false }, records))
    }

    /// Appends one round's record to the current file and fdatasyncs it; returns its `seq`.
    /// On an error the record is cut off again (its callers are answered with the error, and
    /// the round is not published); if the cut fails too, the log is broken and refuses
    /// appends until [`RedoLog::repair`] succeeds.
    pub(crate) fn append(&mut self, changes: &Changes) -> Result<u64> {
        if let Some(n) = changes.too_long {
            return Err(Error::Storage(format!(
                "a key or value of {n} bytes: the redo log ({}) takes at most 4 GiB each",
                self.segments[0].path.display()
            )));
        }
        if changes.buf.len() + 8 > u32::MAX as usize {
            return Err(Error::Storage(format!(
                "a round of {} bytes of changes: the redo log ({}) takes at most 4 GiB a round",
                changes.buf.len(),
                self.segments[0].path.display()
            )));
        }
        self.repair()?;
        let seq = self.next_seq;
        let body_len = 8 + changes.buf.len();
        let mut record = Vec::with_capacity(HEADER + body_len);
        record.extend_from_slice(&(body_len as u32).to_le_bytes());
        record.extend_from_slice(&[0; 4]);
        record.extend_from_slice(&seq.to_le_bytes());
        record.extend_from_slice(&changes.buf);
        let crc = crc32fast::hash(&record[HEADER..]);
        record[4..8].copy_from_slice(&crc.to_le_bytes());
        let current = &mut self.segments[0];
        let written = (|| {
            current.file.write_all_at(&record, current.len)?;
            fail::fail_point!("redo-after-append");
            sync_data(&current.file, &current.path)
        })();
        if let Err(e) = written {
            let e = Error::io(&current.path, &e);
            // Off the log again, so that the log holds exactly the rounds published.
            if let Err(cut) = current.cut(current.len) {
                tracing::warn!(error = %cut, "cutting a failed record off the redo log failed; appends wait for it");
                self.broken = true;
            }
            return Err(e);
        }
        fail::fail_point!("redo-after-fsync");
        current.len += record.len() as u64;
        self.next_seq += 1;
        Ok(seq)
    }

    /// Cuts a failed append's bytes off the current file, if an earlier cut failed.
    pub(crate) fn repair(&mut self) -> Result<()> {
        if self.broken {
            let current = &mut self.segments[0];
            current.cut(current.len)?;
            self.broken = false;
        }
        Ok(())
    }

    /// The `seq` of the last record appended (or replayed).
    pub(crate) fn last_seq(&self) -> u64 {
        self.next_seq - 1
    }

    /// Makes the other file current, after emptying it (its records are all checkpointed:
    /// a turn comes only after the previous checkpoint was durable). Returns the `seq` of the
    /// last record in the file that was current: what the checkpoint being frozen holds.
    pub(crate) fn turn(&mut self) -> Result<u64> {
        // A failed append's bytes are cut off the current file before it stops being current
        // (a repair cuts the current file only).
        self.repair()?;
        self.retire()?;
        self.segments.swap(0, 1);
        Ok(self.last_seq())
    }

    /// Empties the file that is not current, once a durable checkpoint holds its records. If
    /// that fails they stay (a later open skips them: their `seq` is not above
    /// `redo/applied`), and the next turn tries again.
    pub(crate) fn retire(&mut self) -> Result<()> {
        if !self.segments[1].is_empty() {
            self.segments[1].cut(FILE_HEADER)?;
        }
        Ok(())
    }

    /// Empties both files, after a durable checkpoint holding every record (at open).
    pub(crate) fn checkpointed(&mut self) -> Result<()> {
        self.repair()?;
        for segment in &mut self.segments {
            if !segment.is_empty() {
                segment.cut(FILE_HEADER)?;
            }
        }
        Ok(())
    }

    /// Nothing is in the log.
    pub(crate) fn is_empty(&self) -> bool {
        !self.broken && self.segments.iter().all(Segment::is_empty)
    }

    /// Removes the (empty) log files, at a clean close after a checkpoint.
    pub(crate) fn remove(self) {
        if self.is_empty() {
            for segment in &self.segments {
                let _ = std::fs::remove_file(&segment.path);
            }
        }
    }
}

/// fdatasync of the log file at `path`. The failpoint `redo-fsync`'s "return" stands for one
/// that fails (after the record was written); "return(PATH)" only for the file at PATH (a
/// unit test's, beside other tests of the same process that append to logs of their own).
fn sync_data(file: &File, path: &Path) -> std::io::Result<()> {
    #[cfg(feature = "failpoints")]
    if fail::eval("redo-fsync", |only| only.is_none_or(|p| Path::new(&p) == path)) == Some(true) {
        return Err(std::io::Error::other("failpoint redo-fsync"));
    }
    #[cfg(not(feature = "failpoints"))]
    let _ = path;
    file.sync_data()
}

/// The size a record at the start of `bytes` declares, if its header is there.
fn declared_size(bytes: &[u8]) -> Option<u64> {
    let len = u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?) as u64;
    Some(HEADER as u64 + len)
}

/// The whole, checked record at the start of `bytes` and its size, or `None`.
fn parse_record(bytes: &[u8]) -> Option<(Record, usize)> {
    let size = declared_size(bytes)?;
    if size > bytes.len() as u64 || size < (HEADER + 8) as u64 {
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

    const ID: u64 = 0x5eed;

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

    fn open(store: &Path, applied: u64) -> Result<(RedoLog, Vec<Record>)> {
        RedoLog::open(store, applied, ID)
    }

    fn seqs(records: &[Record]) -> Vec<u64> {
        records.iter().map(|r| r.seq).collect()
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
        let (mut log, none) = open(&store, 0).unwrap();
        assert!(none.is_empty() && log.is_empty());
        for n in 1..=4 {
            assert_eq!(log.append(&round(n)).unwrap(), n as u64);
        }
        drop(log);
        let (log, records) = open(&store, 2).unwrap();
        assert_eq!(seqs(&records), vec![3, 4]);
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

    /// The first record that does not check out ends the log — cut short, zeros where the file
    /// grew, a bad crc at the end, or a damaged record with whole ones after it —: it is cut off
    /// there, and the next append follows the last whole record and reads back.
    #[test]
    fn the_first_bad_record_ends_the_log_and_appends_follow_the_last_whole_one() {
        for (tear, expected) in
            [("short", vec![1, 2]), ("zeros", vec![1, 2, 3]), ("bad crc at the end", vec![1, 2]), ("damaged", vec![1])]
        {
            let store = dir().join(format!("{}.redb", tear.replace(' ', "_")));
            let (mut log, _) = open(&store, 0).unwrap();
            let mut ends = Vec::new();
            for n in 1..=3 {
                log.append(&round(n)).unwrap();
                ends.push(std::fs::metadata(path_of(&store)).unwrap().len());
            }
            drop(log);
            let f = OpenOptions::new().write(true).open(path_of(&store)).unwrap();
            match tear {
                "short" => f.set_len(ends[2] - 5).unwrap(),
                "zeros" => f.set_len(ends[2] + 4096).unwrap(),
                "bad crc at the end" => f.write_all_at(&[0xff], ends[2] - 1).unwrap(),
                _ => f.write_all_at(&[0xee], ends[0] + 12).unwrap(), // inside record 2
            }
            let (mut log, records) = open(&store, 0).unwrap();
            assert_eq!(seqs(&records), expected, "{tear}");
            let seq = log.append(&round(9)).unwrap();
            assert_eq!(seq, *expected.last().unwrap() + 1, "{tear}");
            drop(log);
            let (_, records) = open(&store, 0).unwrap();
            assert_eq!(records.last().map(|r| r.seq), Some(seq), "{tear}: the append after the tear reads back");
        }
    }

    /// A log is replayed only into its own store file, and only if it follows on from the
    /// store's checkpoint: the errors name the log and say why.
    #[test]
    fn a_log_of_another_store_or_that_skips_records_is_refused() {
        let store = dir().join("s.redb");
        let (mut log, _) = open(&store, 0).unwrap();
        log.append(&round(1)).unwrap();
        log.append(&round(2)).unwrap();
        drop(log);
        let e = RedoLog::open(&store, 0, ID + 1).err().expect("another store's log").to_string();
        assert!(e.contains("s.redb.redo") && e.contains("belongs to another store file"), "{e}");
        // A store whose checkpoint is behind the log's first record: a gap.
        let (mut log, _) = open(&store, 0).unwrap();
        log.checkpointed().unwrap();
        log.append(&round(3)).unwrap();
        drop(log);
        let e = open(&store, 0).err().expect("a gap").to_string();
        assert!(e.contains("older than the log"), "{e}");
        let (_, records) = open(&store, 2).unwrap();
        assert_eq!(seqs(&records), vec![3]);
    }

    #[test]
    fn a_checkpoint_empties_the_log_and_seq_goes_on() {
        let store = dir().join("s.redb");
        let (mut log, _) = open(&store, 0).unwrap();
        log.append(&round(1)).unwrap();
        log.checkpointed().unwrap();
        for path in paths_of(&store) {
            assert_eq!(std::fs::metadata(path).unwrap().len(), FILE_HEADER);
        }
        assert!(log.is_empty());
        assert_eq!(log.append(&round(2)).unwrap(), 2);
        drop(log);
        let (log, records) = open(&store, 1).unwrap();
        assert_eq!(seqs(&records), vec![2]);
        assert_eq!(log.last_seq(), 2);
    }

    /// The two files take turns: a turn says which rounds the frozen checkpoint holds,
    /// appends go on in the other file, and the open reads both in order — before the
    /// checkpoint's file is emptied (all records after `applied`, or only the newer file's),
    /// and after — whichever file the turn left current.
    #[test]
    fn the_files_take_turns_and_are_read_back_in_order() {
        for turns in 1..=3 {
            let store = dir().join(format!("t{turns}.redb"));
            let (mut log, _) = open(&store, 0).unwrap();
            let mut seq = 0;
            let mut frozen = 0;
            for _ in 0..turns {
                for _ in 0..3 {
                    seq = log.append(&round(seq as u8)).unwrap();
                }
                frozen = log.turn().unwrap();
                assert_eq!(frozen, seq, "a turn freezes every record so far");
            }
            log.append(&round(9)).unwrap();
            log.append(&round(10)).unwrap();
            drop(log);
            // The checkpoint of `frozen` not durable yet: the last two turns' records (the
            // earlier ones were emptied by the turns after their files' checkpoints).
            let (_, records) = open(&store, frozen - 3).unwrap();
            assert_eq!(seqs(&records), ((frozen - 2)..=(frozen + 2)).collect::<Vec<_>>(), "{turns} turns");
            // Durable: only the newer file's.
            let (mut log, records) = open(&store, frozen).unwrap();
            assert_eq!(seqs(&records), vec![frozen + 1, frozen + 2], "{turns} turns");
            log.retire().unwrap();
            assert_eq!(log.append(&round(11)).unwrap(), frozen + 3);
            drop(log);
            let (_, records) = open(&store, frozen).unwrap();
            assert_eq!(seqs(&records), vec![frozen + 1, frozen + 2, frozen + 3], "{turns} turns, after the retire");
        }
    }

    /// Records that do not follow on from the checkpoint are refused; either file may be the
    /// current one.
    #[test]
    fn files_that_do_not_follow_on_are_refused_and_either_may_be_current() {
        let store = dir().join("s.redb");
        let (mut log, _) = open(&store, 0).unwrap();
        log.append(&round(1)).unwrap();
        log.turn().unwrap();
        log.append(&round(2)).unwrap();
        drop(log);
        // The older file loses its record: 2 no longer follows on from the checkpoint at 0.
        let [first, _] = paths_of(&store);
        OpenOptions::new().write(true).open(&first).unwrap().set_len(FILE_HEADER).unwrap();
        let e = open(&store, 0).err().expect("a gap").to_string();
        assert!(e.contains("older than the log"), "{e}");
        // Checkpointed up to 1: the first file is emptied by the next turn and becomes current.
        let (mut log, _) = open(&store, 1).unwrap();
        log.turn().unwrap(); // current: the first file again
        log.append(&round(3)).unwrap();
        drop(log);
        let (_, records) = open(&store, 1).unwrap();
        assert_eq!(seqs(&records), vec![2, 3]);
    }

    /// A failed fsync cuts the record off again: the log holds exactly the records appended
    /// before, and the next append takes the same seq.
    #[cfg(feature = "failpoints")]
    #[test]
    fn a_failed_fsync_cuts_its_record_off() {
        let store = dir().join("s.redb");
        let (mut log, _) = open(&store, 0).unwrap();
        log.append(&round(1)).unwrap();
        let len = std::fs::metadata(path_of(&store)).unwrap().len();
        // Only this test's file: the other tests of this process append to theirs meanwhile.
        fail::cfg("redo-fsync", &format!("return({})", path_of(&store).display())).unwrap();
        let e = log.append(&round(2));
        fail::remove("redo-fsync");
        assert!(e.is_err());
        assert_eq!(std::fs::metadata(path_of(&store)).unwrap().len(), len, "the failed record is cut off");
        assert_eq!(log.append(&round(3)).unwrap(), 2);
        drop(log);
        let (_, records) = open(&store, 0).unwrap();
        assert_eq!(seqs(&records), vec![1, 2]);
        assert_eq!(decode(&records[1].changes).unwrap()[0], Change::Put(Table::Cells, &[3; 3], &[3; 40]));
    }

    #[test]
    fn a_value_too_long_for_a_record_fails_the_append() {
        let store = dir().join("s.redb");
        let (mut log, _) = open(&store, 0).unwrap();
        let c = Changes { too_long: Some(5 << 30), ..Changes::default() };
        let e = log.append(&c).unwrap_err().to_string();
        assert!(e.contains("at most 4 GiB"), "{e}");
    }
}
