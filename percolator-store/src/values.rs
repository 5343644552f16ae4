//! The stored form of a cell's value: large values compressed, above the seam.
//!
//! A transaction's values are written to the backend (its staged data at prewrite, the value
//! its write record inlines) in a **stored form**: a tag byte, then
//! - `0`: the value as it is;
//! - `1`: the value's length (u32 little-endian), then the value compressed with deflate
//!   (raw DEFLATE, RFC 1951; libdeflate, level 1 — miniz_oxide's level 1 before: the same
//!   format, so values written either way read back) — for values of at least
//!   [`COMPRESS_FROM`] bytes that it makes smaller.
//!
//! Stores written before this form existed hold values as they are, with no tag, and nothing in
//! such a value says so. So a store records when it started: the **format marker**, a write
//! record on the reserved cell `__system/format/__values` at a fresh timestamp `T`, written
//! once, by the first store of this version that opens the backend (a conditional row
//! operation: only if the cell has no write record, so two hosts opening at once agree on one
//! `T`). A value is in the stored form exactly when its transaction's start timestamp is above
//! `T`: every store of this version learns `T` before it starts any transaction, so all its
//! transactions start above `T`; every transaction of an earlier version started below it.
//! The reader knows the start timestamp: every write record carries it, and staged data is
//! moved into a write record with the same start timestamp (roll forward copies the bytes, it
//! never decodes them). See `docs/design.md`, "Compressed values".

use crate::backends::{Bigtable, CellRead, Condition, Mutation, Op, Outcome, RowMutation, WriteKind, WriteRecord};
use crate::error::{Error, Result};
use crate::oracle::Oracle;
use crate::timestamp::Timestamp;

/// Values at least this long are compressed (when that makes them smaller): below it, the
/// saving is a few bytes and the CPU is not worth it.
pub const COMPRESS_FROM: usize = 256;

/// Tag of a value stored as it is.
const RAW: u8 = 0;
/// Tag of a value stored deflated, after its length.
const DEFLATE: u8 = 1;
/// libdeflate's fastest level that compresses (`host-bench/src/bin/value-codecs.rs` compares
/// it with miniz_oxide's level 1, used before, and LZ4).
const DEFLATE_LEVEL: i32 = 1;
/// Deflate expands at most ≈ 1032:1; a length claiming more than this times the compressed
/// size (plus slack) is corrupt, and is refused before anything is allocated for it.
const MAX_DEFLATE_RATIO: usize = 1032;

/// Where the format marker lives (a reserved column: not writable through the public API).
const MARKER_TABLE: &str = "__system";
const MARKER_ROW: &[u8] = b"format";
const MARKER_COLUMN: &str = "__values";
/// The marker's value: the version of the stored form.
const MARKER_V1: u8 = 1;

/// The bytes a transaction of this version writes for `value` (its staged data and its write
/// record's value): a tag, then the value as it is or deflated. For tools and tests that write
/// cells beside the protocol, into a store opened by this version (see [`decode_value`]).
pub fn encode_value(value: &[u8]) -> Vec<u8> {
    if value.len() >= COMPRESS_FROM
        && let Ok(len) = u32::try_from(value.len())
        && let Some(out) = deflate(value, len)
    {
        return out;
    }
    let mut out = Vec::with_capacity(1 + value.len());
    out.push(RAW);
    out.extend_from_slice(value);
    out
}

thread_local! {
    /// This thread's decompressor, reused (it holds no tables worth sharing).
    static DECOMPRESSOR: std::cell::RefCell<libdeflater::Decompressor> =
        std::cell::RefCell::new(libdeflater::Decompressor::new());
}

/// A compressor and the buffer it writes into, reused.
struct Deflater {
    compressor: libdeflater::Compressor,
    scratch: Vec<u8>,
}

/// Compressors shared by every thread, most recently returned first. A new compressor
/// allocates its tables (hundreds of KB, faulted in and zeroed), which cost more than
/// compressing a value of a few KB; one per thread (the store's committers are dozens of
/// observer workers on two cores) kept dozens of them, each cold in the cache when its thread
/// came back to it. Shared, about as many are in use as cores compress at once, and the one
/// taken is the one last used.
static DEFLATERS: std::sync::Mutex<Vec<Deflater>> = std::sync::Mutex::new(Vec::new());

/// The largest buffer a pooled compressor keeps: a larger value (a big page) is compressed into
/// a buffer of its own, so the pool never holds megabytes.
const SCRATCH_MAX: usize = 256 << 10;

/// `DEFLATE ‖ len ‖ deflate(value)`, if that is smaller than the value as it is.
fn deflate(value: &[u8], len: u32) -> Option<Vec<u8>> {
    // Worth it only if it saves more than the 5 bytes of tag and length: the stream may take
    // at most `len - 6` bytes (libdeflate answers 0 when it does not fit).
    let room = value.len() - 6;
    let taken = DEFLATERS.lock().unwrap_or_else(std::sync::PoisonError::into_inner).pop();
    let mut d = taken.unwrap_or_else(|| Deflater {
        compressor: libdeflater::Compressor::new(
            libdeflater::CompressionLvl::new(DEFLATE_LEVEL).expect("a valid level"),
        ),
        scratch: Vec::new(),
    });
    let header = |out: &mut Vec<u8>| {
        out.push(DEFLATE);
        out.extend_from_slice(&len.to_le_bytes());
    };
    let out = if room <= SCRATCH_MAX {
        // Into the reused buffer (grown, and zeroed, only for a larger value than any
        // before), then copied at its compressed size: no zeroed buffer of the value's size
        // per value, and no stored form holding that capacity.
        if d.scratch.len() < room {
            d.scratch.resize(room, 0);
        }
        d.compressor.deflate_compress(value, &mut d.scratch[..room]).ok().map(|written| {
            let mut out = Vec::with_capacity(5 + written);
            header(&mut out);
            out.extend_from_slice(&d.scratch[..written]);
            out
        })
    } else {
        let mut out = Vec::with_capacity(5 + room);
        header(&mut out);
        out.resize(5 + room, 0);
        d.compressor.deflate_compress(value, &mut out[5..]).ok().map(|written| {
            out.truncate(5 + written);
            out.shrink_to_fit();
            out
        })
    };
    DEFLATERS.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(d);
    out
}

/// The value a stored form ([`encode_value`]) holds. Bytes that are no stored form (an unknown
/// tag, a truncated or damaged deflate stream, a length that does not match) are
/// [`Error::Corrupt`].
pub fn decode_value(stored: &[u8]) -> Result<Vec<u8>> {
    match stored.first() {
        Some(&RAW) => Ok(stored[1..].to_vec()),
        _ => inflate(stored),
    }
}

/// [`decode_value`] of bytes the caller owns (a value as it is moves out without a copy).
fn decode_owned(mut stored: Vec<u8>) -> Result<Vec<u8>> {
    match stored.first() {
        Some(&RAW) => {
            stored.remove(0);
            Ok(stored)
        }
        _ => inflate(&stored),
    }
}

/// The value of a stored form that is not [`RAW`].
fn inflate(stored: &[u8]) -> Result<Vec<u8>> {
    match stored.first() {
        Some(&DEFLATE) => {
            let len = stored
                .get(1..5)
                .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")) as usize)
                .ok_or_else(|| Error::Corrupt("a compressed value is truncated (no length)".into()))?;
            let packed = &stored[5..];
            if len > packed.len().saturating_mul(MAX_DEFLATE_RATIO).saturating_add(64) {
                return Err(Error::Corrupt(format!(
                    "a compressed value of {} bytes claims {len} bytes uncompressed",
                    packed.len()
                )));
            }
            let mut value = vec![0u8; len];
            let inflated =
                DECOMPRESSOR.with(|d| d.borrow_mut().deflate_decompress(packed, &mut value)).map_err(|e| match e {
                    libdeflater::DecompressionError::InsufficientSpace => {
                        Error::Corrupt(format!("a compressed value inflates to more than its header's {len} bytes"))
                    }
                    libdeflater::DecompressionError::BadData => {
                        Error::Corrupt("a compressed value does not inflate (not a deflate stream)".into())
                    }
                })?;
            if inflated != len {
                return Err(Error::Corrupt(format!(
                    "a compressed value inflates to {inflated} bytes, its header says {len}"
                )));
            }
            Ok(value)
        }
        Some(t) => Err(Error::Corrupt(format!("unknown value encoding tag {t}"))),
        None => Err(Error::Corrupt("an empty stored value (no encoding tag)".into())),
    }
}

/// The store's side of the stored form: which transactions use it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Values {
    /// The format marker's timestamp: transactions that started above it write and read the
    /// stored form; those below it (earlier versions) wrote values as they are.
    encoded_after: Timestamp,
}

impl Values {
    /// Reads the backend's format marker, writing it first if there is none.
    pub(crate) fn open(backend: &dyn Bigtable, oracle: &Oracle) -> Result<Values> {
        // Two attempts: if another store wrote the marker between our read and our write, the
        // condition fails and the second read finds it.
        for _ in 0..2 {
            let read = backend.read_row(MARKER_TABLE, MARKER_ROW, &[MARKER_COLUMN], oracle.next()?)?;
            if let Some(marker) = read.into_iter().next().and_then(|r| r.write) {
                return Values::from_marker(marker);
            }
            let ts = oracle.next()?;
            let op = RowMutation {
                table: MARKER_TABLE.into(),
                row: MARKER_ROW.to_vec(),
                // Put if absent: no write record at all, no lock.
                conditions: vec![
                    Condition::NoWriteSince { column: MARKER_COLUMN.into(), since: Timestamp::ZERO },
                    Condition::NoLock { column: MARKER_COLUMN.into() },
                ],
                mutations: vec![Mutation::PutWrite {
                    column: MARKER_COLUMN.into(),
                    commit_ts: ts,
                    write: WriteRecord { start_ts: ts, kind: WriteKind::Put(vec![MARKER_V1]) },
                }],
            };
            if backend.apply(vec![Op::Row(op)])?.first() == Some(&Outcome::Applied) {
                return Ok(Values { encoded_after: ts });
            }
        }
        Err(Error::Storage("the store's value format marker was neither found nor written".into()))
    }

    fn from_marker((commit_ts, w): (Timestamp, WriteRecord)) -> Result<Values> {
        match w.kind {
            WriteKind::Put(v) if v == [MARKER_V1] => Ok(Values { encoded_after: commit_ts }),
            WriteKind::Put(v) => Err(Error::Corrupt(format!(
                "the value format marker {MARKER_TABLE}/format/{MARKER_COLUMN} holds {v:?}: written by a newer \
                 version of percolator-store?"
            ))),
            other => Err(Error::Corrupt(format!(
                "the value format marker {MARKER_TABLE}/format/{MARKER_COLUMN} is a {other:?} record"
            ))),
        }
    }

    /// What a transaction that started at `start_ts` writes for `value`.
    pub(crate) fn encode(&self, start_ts: Timestamp, value: &[u8]) -> Vec<u8> {
        if start_ts > self.encoded_after { encode_value(value) } else { value.to_vec() }
    }

    /// The value of a write record (`None` for a Delete or Rollback).
    pub(crate) fn decode(&self, w: WriteRecord) -> Result<Option<Vec<u8>>> {
        match w.kind {
            WriteKind::Put(v) if w.start_ts > self.encoded_after => decode_owned(v).map(Some),
            WriteKind::Put(v) => Ok(Some(v)),
            WriteKind::Delete | WriteKind::Rollback => Ok(None),
        }
    }

    /// The visible value of a read cell.
    pub(crate) fn read(&self, r: CellRead) -> Result<Option<Vec<u8>>> {
        match r.write {
            Some((_, w)) => self.decode(w),
            None => Ok(None),
        }
    }

    /// [`Values::read`] of a borrowed read.
    pub(crate) fn read_ref(&self, r: &CellRead) -> Result<Option<Vec<u8>>> {
        match &r.write {
            Some((_, WriteRecord { start_ts, kind: WriteKind::Put(v) })) if *start_ts > self.encoded_after => {
                decode_value(v).map(Some)
            }
            Some((_, WriteRecord { kind: WriteKind::Put(v), .. })) => Ok(Some(v.clone())),
            _ => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_and_large_ones_shrink() {
        let text = "<p>The quick brown fox jumps over the lazy dog.</p>\n".repeat(40);
        for v in [&b""[..], b"x", &[7u8; 255], &[7u8; 256], text.as_bytes()] {
            let stored = encode_value(v);
            assert_eq!(decode_value(&stored).unwrap(), v);
            assert_eq!(stored[0], if v.len() >= COMPRESS_FROM { DEFLATE } else { RAW }, "{} bytes", v.len());
        }
        assert!(encode_value(text.as_bytes()).len() < text.len() / 10);
        // Incompressible bytes stay as they are.
        assert_eq!(encode_value(&noise(4096, 1))[0], RAW);
    }

    /// `len` incompressible bytes (xorshift from `seed`).
    fn noise(len: usize, seed: u64) -> Vec<u8> {
        let mut x = seed;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    /// Through the pooled buffer and past it (a value larger than `SCRATCH_MAX`), in turn
    /// and from several threads at once: each round-trips, stored at its compressed size (no
    /// capacity of the whole value kept), and whatever a buffer held before does not leak in.
    #[test]
    fn values_compress_the_same_through_the_pool_and_past_it() {
        let big = "<li><a href=\"/docs/api/item\">An item of the navigation</a></li>\n".repeat(6000);
        assert!(big.len() > SCRATCH_MAX + 6);
        let noise = noise(SCRATCH_MAX + 4096, 7);
        let values: Vec<Vec<u8>> = vec![
            big.as_bytes().to_vec(),
            b"short text, short text, short text, ".repeat(20),
            noise.clone(),
            noise[..1000].to_vec(),
            big.as_bytes()[..300].to_vec(),
        ];
        std::thread::scope(|scope| {
            for t in 0..4 {
                let (values, noise) = (&values, &noise);
                scope.spawn(move || {
                    for round in 0..20 {
                        let v = &values[(t + round) % values.len()];
                        let stored = encode_value(v);
                        assert_eq!(decode_value(&stored).unwrap(), *v);
                        assert_eq!(stored.capacity(), stored.len(), "{} bytes", v.len());
                        let packs = stored[0] == DEFLATE;
                        assert_eq!(packs, !v.starts_with(&noise[..100]), "{} bytes", v.len());
                    }
                });
            }
        });
    }

    /// Values stored before libdeflate, deflated by miniz_oxide (level 1, and the other
    /// levels), read back: the stream is the same format.
    #[test]
    fn values_deflated_by_miniz_oxide_read_back() {
        let text = "<a href=\"/docs/page\">The quick brown fox</a> jumps over the lazy dog.\n".repeat(300);
        for level in [1, 6, 9] {
            let packed = miniz_oxide::deflate::compress_to_vec(text.as_bytes(), level);
            let mut stored = vec![DEFLATE];
            stored.extend_from_slice(&(text.len() as u32).to_le_bytes());
            stored.extend_from_slice(&packed);
            assert_eq!(decode_value(&stored).unwrap(), text.as_bytes(), "level {level}");
        }
        // And what libdeflate writes, miniz_oxide reads (a store opened by an older host).
        let stored = encode_value(text.as_bytes());
        assert_eq!(stored[0], DEFLATE);
        assert_eq!(miniz_oxide::inflate::decompress_to_vec(&stored[5..]).unwrap(), text.as_bytes());
    }

    #[test]
    fn damaged_stored_values_are_corrupt_not_a_panic() {
        let stored = encode_value("abc".repeat(200).as_bytes());
        let corrupt = |b: &[u8]| matches!(decode_value(b), Err(Error::Corrupt(_)));
        assert!(corrupt(&[]));
        assert!(corrupt(&[9, 1, 2]));
        assert!(corrupt(&stored[..3]), "no length");
        assert!(corrupt(&stored[..stored.len() - 2]), "truncated stream");
        let mut wrong_len = stored.clone();
        wrong_len[1] ^= 1;
        assert!(corrupt(&wrong_len), "length does not match");
        let mut huge = stored.clone();
        huge[1..5].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(corrupt(&huge), "a length no deflate stream can reach");
        let mut garbage = stored;
        for b in &mut garbage[5..] {
            *b = b.wrapping_mul(31).wrapping_add(7);
        }
        assert!(decode_value(&garbage).is_err_and(|e| matches!(e, Error::Corrupt(_))));
    }

    #[test]
    fn only_transactions_after_the_marker_use_the_stored_form() {
        let v = Values { encoded_after: Timestamp::from_raw(100) };
        let big = vec![b'a'; 1000];
        assert_eq!(v.encode(Timestamp::from_raw(99), &big), big, "an earlier version's transaction");
        let stored = v.encode(Timestamp::from_raw(101), &big);
        assert!(stored.len() < 100);
        let rec = |start, bytes: &[u8]| WriteRecord {
            start_ts: Timestamp::from_raw(start),
            kind: WriteKind::Put(bytes.to_vec()),
        };
        assert_eq!(v.decode(rec(101, &stored)).unwrap(), Some(big.clone()));
        // A value written before the marker is read as it is, whatever its first byte.
        for old in [&b"\x01\x02"[..], b"\x00abc", b""] {
            assert_eq!(v.decode(rec(50, old)).unwrap(), Some(old.to_vec()));
            let read = CellRead { lock: None, write: Some((Timestamp::from_raw(60), rec(50, old))) };
            assert_eq!(v.read_ref(&read).unwrap(), Some(old.to_vec()));
        }
        let del = WriteRecord { start_ts: Timestamp::from_raw(101), kind: WriteKind::Delete };
        assert_eq!(v.decode(del).unwrap(), None);
    }
}
