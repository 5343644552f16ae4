//! Key encoding shared by every backend (see `docs/design.md`, "Key encoding").
//!
//! A cell key is `enc(table) ‖ enc(row) ‖ enc(column) ‖ kind ‖ !ts`, where `enc` is an
//! order-preserving, prefix-free escaping (`0x00` → `0x00 0xFF`, terminator `0x00 0x01`) and
//! `!ts` is the bitwise complement of the timestamp in big-endian, so the versions of a cell
//! sort newest first. Kinds order a cell's lock before its write records before its data, so one
//! forward seek from `(cell, LOCK, !start_ts)` finds the lock and then the newest visible write.

use crate::error::{Error, Result};
use crate::timestamp::Timestamp;

/// The kind byte of a cell key: what the version holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// Paper column `c:lock`: an uncommitted transaction's lock, keyed by its start_ts.
    Lock = 1,
    /// Paper column `c:write`: a committed write record, keyed by commit_ts.
    Write = 2,
    /// Paper column `c:data`: the staged value of a prewrite, keyed by start_ts.
    Data = 3,
}

impl Kind {
    pub(crate) fn from_byte(b: u8) -> Option<Kind> {
        match b {
            1 => Some(Kind::Lock),
            2 => Some(Kind::Write),
            3 => Some(Kind::Data),
            _ => None,
        }
    }
}

/// Longest table or column name, in bytes.
pub const MAX_NAME_LEN: usize = 255;
/// Longest row key, in bytes.
pub const MAX_ROW_LEN: usize = 4096;
/// Column names starting with this prefix are reserved for the system (observer acks).
pub const RESERVED_COLUMN_PREFIX: &str = "__";

/// Checks a table name: 1 to 255 bytes, no control characters.
pub fn validate_table(table: &str) -> Result<()> {
    validate_name("table", table)
}

/// Checks a user column name: like a table name, and not in the reserved `__` namespace.
pub fn validate_column(column: &str) -> Result<()> {
    validate_name("column", column)?;
    if column.starts_with(RESERVED_COLUMN_PREFIX) {
        return Err(Error::InvalidArgument(format!(
            "column {column:?} is in the reserved namespace {RESERVED_COLUMN_PREFIX:?}"
        )));
    }
    Ok(())
}

/// Checks a row key: at most 4096 bytes (the empty row is allowed).
pub fn validate_row(row: &[u8]) -> Result<()> {
    if row.len() > MAX_ROW_LEN {
        return Err(Error::InvalidArgument(format!(
            "row key is {} bytes, longer than the limit of {MAX_ROW_LEN}",
            row.len()
        )));
    }
    Ok(())
}

fn validate_name(what: &str, name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::InvalidArgument(format!("{what} name is empty")));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(Error::InvalidArgument(format!(
            "{what} name {:?}… is {} bytes, longer than the limit of {MAX_NAME_LEN}",
            &name[..name.floor_char_boundary(32)],
            name.len()
        )));
    }
    if let Some(c) = name.chars().find(|c| c.is_control()) {
        return Err(Error::InvalidArgument(format!("{what} name {name:?} contains the control character {c:?}")));
    }
    Ok(())
}

/// Appends the order-preserving, prefix-free encoding of `bytes`.
pub(crate) fn enc(out: &mut Vec<u8>, bytes: &[u8]) {
    // Runs without 0x00 (names and most rows are one run) are copied whole.
    let mut rest = bytes;
    while let Some(zero) = memchr::memchr(0, rest) {
        out.extend_from_slice(&rest[..zero]);
        out.extend_from_slice(&[0, 0xFF]);
        rest = &rest[zero + 1..];
    }
    out.extend_from_slice(rest);
    out.extend_from_slice(&[0, 1]);
}

/// Decodes one `enc` component from the front of `input`, returning it and the rest.
pub(crate) fn dec(input: &[u8]) -> Option<(Vec<u8>, &[u8])> {
    let mut out = Vec::new();
    let mut rest = input;
    // Runs of bytes without 0x00 are copied whole; each 0x00 starts an escape or the terminator.
    loop {
        let zero = rest.iter().position(|&b| b == 0)?;
        out.extend_from_slice(&rest[..zero]);
        match rest.get(zero + 1)? {
            0xFF => out.push(0),
            1 => return Some((out, &rest[zero + 2..])),
            _ => return None,
        }
        rest = &rest[zero + 2..];
    }
}

/// `enc(table) ‖ enc(row)`: the prefix of every key of one row.
pub fn row_prefix(table: &str, row: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(table.len() + row.len() + 8);
    enc(&mut k, table.as_bytes());
    enc(&mut k, row);
    k
}

/// `enc(table)`: the prefix of every key of one table.
pub(crate) fn table_prefix(table: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(table.len() + 2);
    enc(&mut k, table.as_bytes());
    k
}

/// `enc(table) ‖ enc(row) ‖ enc(column)`: one cell, and also its notify key.
pub fn cell_prefix(table: &str, row: &[u8], column: &str) -> Vec<u8> {
    // Room for the three terminators, a few escapes and a version's suffix (a cell prefix is
    // most often the start of a version key): one allocation.
    let mut k = Vec::with_capacity(table.len() + row.len() + column.len() + 16);
    enc(&mut k, table.as_bytes());
    enc(&mut k, row);
    enc(&mut k, column.as_bytes());
    k
}

/// `version_key(&cell_prefix(table, row, column), kind, ts)` in one allocation.
pub(crate) fn cell_version_key(table: &str, row: &[u8], column: &str, kind: Kind, ts: Timestamp) -> Vec<u8> {
    let mut k = cell_prefix(table, row, column);
    k.push(kind as u8);
    k.extend_from_slice(&(!ts.raw()).to_be_bytes());
    k
}

/// The full key of one version of one cell.
pub fn version_key(cell: &[u8], kind: Kind, ts: Timestamp) -> Vec<u8> {
    let mut k = Vec::with_capacity(cell.len() + 9);
    k.extend_from_slice(cell);
    k.push(kind as u8);
    k.extend_from_slice(&(!ts.raw()).to_be_bytes());
    k
}

/// The first key after every key that starts with `prefix`, or `None` if there is none (a row
/// range `[prefix, prefix_end(prefix))` holds exactly the rows starting with `prefix`).
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xFF {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// A decoded cell key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodedKey {
    /// The cell's table.
    pub table: String,
    /// The cell's row.
    pub row: Vec<u8>,
    /// The cell's column.
    pub column: String,
    /// What the version holds.
    pub kind: Kind,
    /// The version's timestamp.
    pub ts: Timestamp,
    /// Length of the `enc(table) ‖ enc(row) ‖ enc(column)` prefix.
    pub cell_len: usize,
}

/// Decodes a full version key.
pub fn decode_version_key(key: &[u8]) -> Result<DecodedKey> {
    let bad = || Error::Corrupt(format!("malformed cell key {key:02x?}"));
    let (cell, rest) = decode_cell(key).ok_or_else(bad)?;
    if rest.len() != 9 {
        return Err(bad());
    }
    let kind = Kind::from_byte(rest[0]).ok_or_else(bad)?;
    let ts = !u64::from_be_bytes(rest[1..9].try_into().map_err(|_| bad())?);
    Ok(DecodedKey {
        table: cell.0,
        row: cell.1,
        column: cell.2,
        kind,
        ts: Timestamp::from_raw(ts),
        cell_len: key.len() - 9,
    })
}

type Cell = (String, Vec<u8>, String);

/// Decodes `enc(table) ‖ enc(row) ‖ enc(column)` from the front of `key`.
/// The length of the cell prefix (`enc(table) ‖ enc(row) ‖ enc(column)`) at the front of
/// `key`, without copying it; `None` if `key` does not start with three whole components.
pub(crate) fn cell_prefix_len(key: &[u8]) -> Option<usize> {
    let mut at = 0;
    for _ in 0..3 {
        loop {
            let zero = at + memchr::memchr(0, &key[at..])?;
            match key.get(zero + 1)? {
                0xFF => at = zero + 2,
                1 => {
                    at = zero + 2;
                    break;
                }
                _ => return None,
            }
        }
    }
    Some(at)
}

pub(crate) fn decode_cell(key: &[u8]) -> Option<(Cell, &[u8])> {
    let (table, rest) = dec(key)?;
    let (row, rest) = dec(rest)?;
    let (column, rest) = dec(rest)?;
    Some(((String::from_utf8(table).ok()?, row, String::from_utf8(column).ok()?), rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_preserves_order_and_round_trips() {
        let rows: Vec<&[u8]> = vec![b"", b"\0", b"\0\0", b"\0\x01", b"a", b"a\0", b"ab", b"b", b"\xff"];
        let mut encoded: Vec<Vec<u8>> = rows.iter().map(|r| row_prefix("t", r)).collect();
        let before = encoded.clone();
        encoded.sort();
        assert_eq!(encoded, before, "encoding must sort like the raw rows");
        for r in rows {
            let k = version_key(&cell_prefix("t", r, "c:x"), Kind::Write, Timestamp::from_raw(7));
            assert_eq!(cell_version_key("t", r, "c:x", Kind::Write, Timestamp::from_raw(7)), k);
            let d = decode_version_key(&k).unwrap();
            assert_eq!((d.table.as_str(), d.row.as_slice(), d.column.as_str()), ("t", r, "c:x"));
            assert_eq!((d.kind, d.ts), (Kind::Write, Timestamp::from_raw(7)));
        }
    }

    #[test]
    fn dec_inverts_enc_and_refuses_malformed_input() {
        for x in [&b""[..], b"\0", b"\0\0", b"a\0b", b"\xff\0\xff", b"plain"] {
            let mut k = Vec::new();
            enc(&mut k, x);
            k.extend_from_slice(b"tail");
            assert_eq!(dec(&k), Some((x.to_vec(), &b"tail"[..])), "{x:?}");
        }
        // No terminator, a 0x00 at the end, an unknown escape.
        for bad in [&b"abc"[..], b"ab\0", b"a\0\x02b\0\x01"] {
            assert_eq!(dec(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn versions_sort_lock_then_newest_write_first() {
        let cell = cell_prefix("t", b"r", "c");
        let lock = version_key(&cell, Kind::Lock, Timestamp::from_raw(5));
        let w9 = version_key(&cell, Kind::Write, Timestamp::from_raw(9));
        let w3 = version_key(&cell, Kind::Write, Timestamp::from_raw(3));
        let data = version_key(&cell, Kind::Data, Timestamp::from_raw(100));
        assert!(lock < w9 && w9 < w3 && w3 < data);
    }

    #[test]
    fn names_are_validated() {
        assert!(validate_table("").is_err());
        assert!(validate_column("__ack").is_err());
        assert!(validate_column("a\nb").is_err());
        assert!(validate_row(&vec![0; MAX_ROW_LEN + 1]).is_err());
        assert!(validate_column("raw:html").is_ok());
    }
}
