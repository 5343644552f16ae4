//! The memtable in front of redb (`docs/design.md`, "A memtable in front of redb"): rounds of
//! the group commit publish their changes into sorted maps in memory, which readers see over
//! redb's last checkpoint, and a checkpoint thread writes them to redb once a second.
//!
//! This module holds what does not depend on redb: the maps ([`Mem`]), and reading an ordered
//! map through layers of them ([`Layered`]), newest first, a tombstone hiding what is below.

use std::collections::BTreeMap;
use std::collections::btree_map;
use std::iter::Peekable;
use std::ops::Bound;

use crate::cells::{KvRead, Visitor};
use crate::error::Result;
use crate::redo::Table;

/// One table's layer: key → value, or `None` for a key removed (a tombstone).
pub(crate) type Map = BTreeMap<Vec<u8>, Option<Vec<u8>>>;

/// Bytes a map entry is counted as beyond its key and value (the map's own nodes).
const ENTRY_OVERHEAD: usize = 48;

/// One layer of changes to the three tables.
#[derive(Default)]
pub(crate) struct Mem {
    tables: [Map; 3],
    /// About how much memory the maps hold.
    bytes: usize,
    /// Which cells the cells table may hold (the memtable's layers have one; a round's overlay,
    /// small and read by its leader alone, has none).
    cells: Option<CellFilter>,
}

impl Mem {
    /// An empty layer that keeps a [`CellFilter`] of its cells table.
    pub(crate) fn filtered() -> Mem {
        Mem { cells: Some(CellFilter::new(FILTER_CELLS)), ..Mem::default() }
    }

    /// The filter of the cells table's cells, if this layer keeps one.
    pub(crate) fn cell_filter(&self) -> Option<&CellFilter> {
        self.cells.as_ref()
    }

    /// Sets `key` in `table` to `value` (`None`: removed), noting its cell in the filter if
    /// this layer keeps one. (Rounds fill their overlay through [`Mem::tables_mut`]; the
    /// memtable's layers change only by [`Mem::absorb`].)
    #[cfg(test)]
    pub(crate) fn set(&mut self, table: Table, key: Vec<u8>, value: Option<Vec<u8>>) {
        if table == Table::Cells
            && let Some(filter) = &mut self.cells
        {
            filter.note(&CellFilter::hashes([&key]));
        }
        self.put(table, key, value);
    }

    /// [`Mem::set`] without the filter: for keys whose cells are noted already.
    fn put(&mut self, table: Table, key: Vec<u8>, value: Option<Vec<u8>>) {
        let added = key.len() + value.as_ref().map_or(0, Vec::len) + ENTRY_OVERHEAD;
        match self.tables[table as usize].entry(key) {
            btree_map::Entry::Occupied(mut e) => {
                let old = e.get().as_ref().map_or(0, Vec::len);
                self.bytes = self.bytes - old + value.as_ref().map_or(0, Vec::len);
                e.insert(value);
            }
            btree_map::Entry::Vacant(e) => {
                self.bytes += added;
                e.insert(value);
            }
        }
    }

    /// Moves every entry of `newer` into this layer (`newer`'s values win). `cells` are the
    /// [`CellFilter::hashes`] of `newer`'s cells table (taken beforehand, outside whatever lock
    /// guards this layer), noted in this layer's filter.
    pub(crate) fn absorb(&mut self, newer: Mem, cells: &CellHashes) {
        debug_assert_eq!(*cells, CellFilter::hashes(newer.table(Table::Cells).keys()), "the hashes of another layer");
        if let Some(filter) = &mut self.cells {
            filter.note(cells);
        }
        for (t, map) in newer.tables.into_iter().enumerate() {
            let table = Table::ALL[t];
            if self.tables[t].is_empty() {
                self.bytes += map_bytes(&map);
                self.tables[t] = map;
                continue;
            }
            for (k, v) in map {
                self.put(table, k, v);
            }
        }
    }

    /// One table's map.
    pub(crate) fn table(&self, table: Table) -> &Map {
        &self.tables[table as usize]
    }

    /// The three maps, to fill a round's three tables at once ([`Mem::bytes`] is counted
    /// when the round is absorbed into the memtable).
    pub(crate) fn tables_mut(&mut self) -> [&mut Map; 3] {
        // Written around the filter: only for a round's overlay, which keeps none.
        debug_assert!(self.cells.is_none(), "a filtered layer's maps written directly");
        let [c, n, m] = &mut self.tables;
        [c, n, m]
    }

    /// Recounts [`Mem::bytes`] (a check of the count kept as entries are set).
    #[cfg(test)]
    fn recount(&mut self) {
        self.bytes = self.tables.iter().map(map_bytes).sum();
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.tables.iter().all(Map::is_empty)
    }

    /// About how much memory the layer holds.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }
}

/// The cells a layer's filter is sized for (about 10 bits each: 640 KiB, a few per cent of
/// false positives at this many; a 5 s checkpoint interval of the web-index load notes about
/// 300,000; more only raise the false positives, which cost the seek the filter saves).
const FILTER_CELLS: usize = 1 << 19;
/// Bits set per cell, all in one 64-byte block.
const FILTER_BITS: u32 = 6;

/// Which cells a layer of the cells table may hold: a blocked Bloom filter of the cell prefixes
/// (`enc(table) ‖ enc(row) ‖ enc(column)`) of its keys, puts and tombstones alike, so a read or
/// a condition confined to one cell skips the seek in every layer that holds no key of it
/// (`docs/design.md`, "A memtable in front of redb", 11.). No false negatives: every key set in
/// the layer had its cell noted first (or made the filter answer "may hold" for everything).
pub(crate) struct CellFilter {
    bits: BlockedBloom,
    /// A key that is not a version key was noted: the filter excludes nothing.
    all: bool,
}

/// The hashes of the cells of a cells table's keys, to note in a [`CellFilter`]; `None` if a
/// key is not a version key.
pub(crate) type CellHashes = Option<Vec<u64>>;

/// A fixed seed: the hash only places bits, and keys chosen to collide cost only seeks.
fn cell_hash(cell: &[u8]) -> u64 {
    use std::hash::BuildHasher;
    foldhash::fast::FixedState::with_seed(0x5eed_ce11_f11e_5eed).hash_one(cell)
}

/// A blocked Bloom filter of 64-bit hashes: [`FILTER_BITS`] bits per hash, all in one 64-byte
/// block (one cache line read per question). Of the memtable's layers ([`CellFilter`]) and of
/// GC's rows (`dirty_rows.rs`).
pub(crate) struct BlockedBloom {
    blocks: Vec<[u64; 8]>,
}

impl BlockedBloom {
    /// `blocks` blocks of 512 bits (at least one).
    pub(crate) fn with_blocks(blocks: usize) -> BlockedBloom {
        BlockedBloom { blocks: vec![[0; 8]; blocks.max(1)] }
    }

    /// The block and the bits in it of a hash.
    fn place(&self, hash: u64) -> (usize, [(usize, u64); FILTER_BITS as usize]) {
        // The high half picks the block; 9 bits at a time of the low half's mix, the bits.
        let block = (((hash >> 32) * self.blocks.len() as u64) >> 32) as usize;
        let mut mix = (hash as u32 as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let mut bits = [(0, 0); FILTER_BITS as usize];
        for b in &mut bits {
            let v = (mix >> 55) as usize; // 9 bits
            *b = (v >> 6, 1u64 << (v & 63));
            mix <<= 9;
        }
        (block, bits)
    }

    /// Notes `hash`; true if the filter certainly did not hold it before.
    pub(crate) fn insert(&mut self, hash: u64) -> bool {
        let (block, bits) = self.place(hash);
        let block = &mut self.blocks[block];
        let mut new = false;
        for (word, bit) in bits {
            new |= block[word] & bit == 0;
            block[word] |= bit;
        }
        new
    }

    /// False if `hash` was certainly never noted.
    pub(crate) fn contains(&self, hash: u64) -> bool {
        let (block, bits) = self.place(hash);
        let block = &self.blocks[block];
        bits.iter().all(|&(word, bit)| block[word] & bit != 0)
    }
}

impl CellFilter {
    fn new(cells: usize) -> CellFilter {
        CellFilter { bits: BlockedBloom::with_blocks((cells * 10).div_ceil(512)), all: false }
    }

    /// The hashes of the cells of `keys` (each cell once per run of its keys).
    pub(crate) fn hashes<'a>(keys: impl IntoIterator<Item = &'a Vec<u8>>) -> CellHashes {
        let mut out = Vec::new();
        let mut last: Option<&[u8]> = None;
        for key in keys {
            let cell = &key[..crate::key::cell_prefix_len(key)?];
            if last != Some(cell) {
                out.push(cell_hash(cell));
                last = Some(cell);
            }
        }
        Some(out)
    }

    fn note(&mut self, cells: &CellHashes) {
        let Some(hashes) = cells else {
            self.all = true;
            return;
        };
        for &hash in hashes {
            self.bits.insert(hash);
        }
    }

    /// False if the layer certainly holds no key of the cell whose prefix is `cell`.
    pub(crate) fn may_hold(&self, cell: &[u8]) -> bool {
        if self.all {
            return true;
        }
        self.bits.contains(cell_hash(cell))
    }
}

fn map_bytes(map: &Map) -> usize {
    map.iter().map(|(k, v)| k.len() + v.as_ref().map_or(0, Vec::len) + ENTRY_OVERHEAD).sum()
}

/// An ordered map read through `layers` (newest first; absent ones skipped) over `base`.
pub(crate) struct Layered<'a> {
    pub(crate) layers: [Option<&'a Map>; 3],
    /// Each layer's [`CellFilter`], if it has one (only the cells table's layers do).
    pub(crate) filters: [Option<&'a CellFilter>; 3],
    pub(crate) base: &'a dyn KvRead,
}

impl Layered<'_> {
    /// The layers that may hold keys of `cell` (all when it is `None`: not one cell's keys).
    fn layers_for(&self, cell: Option<&[u8]>) -> impl Iterator<Item = &Map> {
        self.layers.iter().zip(&self.filters).filter_map(move |(layer, filter)| match (layer, filter, cell) {
            (Some(layer), Some(filter), Some(cell)) => filter.may_hold(cell).then_some(*layer),
            (layer, _, _) => *layer,
        })
    }

    /// The cell prefix of `key`, if a layer has a filter to ask about it.
    fn cell_of<'k>(&self, key: &'k [u8]) -> Option<&'k [u8]> {
        if self.filters.iter().all(Option::is_none) {
            return None;
        }
        Some(&key[..crate::key::cell_prefix_len(key)?])
    }
}

impl KvRead for Layered<'_> {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        for layer in self.layers_for(self.cell_of(key)) {
            if let Some(value) = layer.get(key) {
                return Ok(value.clone());
            }
        }
        if !self.base.may_hold_key(key) {
            return Ok(None);
        }
        self.base.get(key)
    }

    fn for_range(&self, from: &[u8], to: Option<&[u8]>, f: Visitor<'_>) -> Result<()> {
        if to.is_some_and(|to| to <= from) {
            return Ok(()); // empty (or inverted): `BTreeMap::range` would panic on the latter
        }
        // Only the lower bound is sought in each map (one descent instead of two: most ranges
        // here are a cell's few keys); the merge stops at `to` itself.
        let bounds = (Bound::Included(from), Bound::Unbounded);
        // A range inside one cell's keys (`from` and `to` both start with its prefix: the
        // encoding is prefix-free, so every key between them does too) skips the layers whose
        // filter says they hold none of them.
        let cell = self.cell_of(from).filter(|cell| to.is_some_and(|to| to.starts_with(cell)));
        let mut mem =
            Merge { heads: self.layers_for(cell).map(|m| m.range::<[u8], _>(bounds).peekable()).collect(), to };
        if !self.base.may_hold(from, to) {
            // Nothing of the base in the range (`base_hints.rs`): the layers alone.
            while let Some((k, v)) = mem.next() {
                if let Some(v) = v
                    && !f(k, v)?
                {
                    break;
                }
            }
            return Ok(());
        }
        if mem.least().is_none() {
            return self.base.for_range(from, to, f);
        }
        // The base drives; the layers' entries are merged in before (and instead of) its own.
        let mut stopped = false;
        self.base.for_range(from, to, &mut |key, value| {
            while let Some((k, v)) = mem.next_below(key) {
                if let Some(v) = v
                    && !f(k, v)?
                {
                    stopped = true;
                    return Ok(false);
                }
            }
            let go_on = match mem.take_equal(key) {
                Some(Some(v)) => f(key, v)?,
                Some(None) => true, // removed in a layer
                None => f(key, value)?,
            };
            stopped = !go_on;
            Ok(go_on)
        })?;
        if !stopped {
            while let Some((k, v)) = mem.next() {
                if let Some(v) = v
                    && !f(k, v)?
                {
                    break;
                }
            }
        }
        Ok(())
    }
}

type Head<'a> = Peekable<btree_map::Range<'a, Vec<u8>, Option<Vec<u8>>>>;

/// The layers' ranges merged: each key once, from the newest layer that holds it, up to `to`.
struct Merge<'a> {
    heads: Vec<Head<'a>>,
    to: Option<&'a [u8]>,
}

impl<'a> Merge<'a> {
    /// The smallest key below `to` any layer has next, and the index of the newest layer that
    /// has it.
    fn least(&mut self) -> Option<(&'a [u8], usize)> {
        let mut least: Option<(&'a [u8], usize)> = None;
        for (i, head) in self.heads.iter_mut().enumerate() {
            if let Some((k, _)) = head.peek() {
                let k: &'a [u8] = k.as_slice();
                if least.is_none_or(|(l, _)| k < l) {
                    least = Some((k, i));
                }
            }
        }
        least.filter(|(k, _)| self.to.is_none_or(|to| *k < to))
    }

    /// Takes the least key (the newest layer's entry; the others' for it are skipped).
    fn next(&mut self) -> Option<(&'a [u8], Option<&'a [u8]>)> {
        let (key, newest) = self.least()?;
        let mut out = None;
        for (i, head) in self.heads.iter_mut().enumerate() {
            if head.peek().is_some_and(|(k, _)| k.as_slice() == key) {
                let (k, v) = head.next().expect("peeked");
                if i == newest {
                    out = Some((k.as_slice(), v.as_deref()));
                }
            }
        }
        out
    }

    /// Takes the least key if it is below `bound`.
    fn next_below(&mut self, bound: &[u8]) -> Option<(&'a [u8], Option<&'a [u8]>)> {
        let (key, _) = self.least()?;
        if key < bound { self.next() } else { None }
    }

    /// Takes the least key if it is `key`: what the newest layer holding it says.
    fn take_equal(&mut self, key: &[u8]) -> Option<Option<&'a [u8]>> {
        match self.least() {
            Some((k, _)) if k == key => self.next().map(|(_, v)| v),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    /// A base map as redb would hold it.
    use crate::cells::tests::Map as Base;

    /// A small deterministic generator (no dependency on the seed's platform).
    struct Rng(u64);
    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    fn key(n: u64) -> Vec<u8> {
        // Keys of different lengths, so that prefixes sort before their extensions.
        let mut k = vec![b'k'; (n % 3) as usize];
        k.extend_from_slice(&(n / 3).to_be_bytes()[6..]);
        k
    }

    /// Random layers over a random base, read back through [`Layered`] against a model map
    /// (each layer applied over the base in turn): every get, and every range — with and
    /// without an end, empty and inverted ones, stopped early at every length.
    #[test]
    fn layered_reads_equal_the_layers_applied_in_order() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for round in 0..200 {
            let base: BTreeMap<Vec<u8>, Vec<u8>> =
                (0..rng.below(30)).map(|_| (key(rng.below(60)), vec![0, rng.below(255) as u8])).collect();
            let mut layers = [Map::new(), Map::new(), Map::new()];
            for (l, layer) in layers.iter_mut().enumerate() {
                for _ in 0..rng.below(25) {
                    let value = (rng.below(3) > 0).then(|| vec![l as u8 + 1, rng.below(255) as u8]);
                    layer.insert(key(rng.below(60)), value);
                }
            }
            // The model: base, then the oldest layer (the last), …, the newest (the first).
            let mut model = base.clone();
            for layer in layers.iter().rev() {
                for (k, v) in layer {
                    match v {
                        Some(v) => model.insert(k.clone(), v.clone()),
                        None => model.remove(k),
                    };
                }
            }
            let base = Base(base);
            let present = (round % 4) as usize; // some layers absent
            let layered = Layered {
                layers: [
                    (present != 0).then_some(&layers[0]),
                    (present != 1).then_some(&layers[1]),
                    (present != 2).then_some(&layers[2]),
                ],
                filters: [None; 3],
                base: &base,
            };
            if present < 3 {
                // An absent layer is not applied: rebuild the model without it.
                let mut m = base.0.clone();
                for (i, layer) in layers.iter().enumerate().rev() {
                    if i == present {
                        continue;
                    }
                    for (k, v) in layer {
                        match v {
                            Some(v) => m.insert(k.clone(), v.clone()),
                            None => m.remove(k),
                        };
                    }
                }
                model = m;
            }
            for n in 0..60 {
                assert_eq!(layered.get(&key(n)).unwrap(), model.get(&key(n)).cloned(), "round {round}: get {n}");
            }
            for _ in 0..20 {
                let from = key(rng.below(60));
                let to = (rng.below(4) > 0).then(|| key(rng.below(60)));
                let expect: Vec<(Vec<u8>, Vec<u8>)> = if to.as_ref().is_some_and(|t| *t <= from) {
                    Vec::new()
                } else {
                    let bounds =
                        (Bound::Included(from.as_slice()), to.as_deref().map_or(Bound::Unbounded, Bound::Excluded));
                    model.range::<[u8], _>(bounds).map(|(k, v)| (k.clone(), v.clone())).collect()
                };
                for stop_after in [usize::MAX, 0, 1, 2, 5] {
                    let mut got = Vec::new();
                    layered
                        .for_range(&from, to.as_deref(), &mut |k, v| {
                            if got.len() == stop_after {
                                return Ok(false);
                            }
                            got.push((k.to_vec(), v.to_vec()));
                            Ok(true)
                        })
                        .unwrap();
                    let want: Vec<_> = expect.iter().take(stop_after).cloned().collect();
                    assert_eq!(got, want, "round {round}: range {from:?}..{to:?}, stopping after {stop_after}");
                }
            }
        }
    }

    /// An error from the visitor ends the range with that error.
    #[test]
    fn a_visitors_error_ends_the_range() {
        let base = Base([(key(1), vec![1]), (key(4), vec![4])].into_iter().collect());
        let layer: Map = [(key(2), Some(vec![2])), (key(5), Some(vec![5]))].into_iter().collect();
        let layered = Layered { layers: [Some(&layer), None, None], filters: [None; 3], base: &base };
        let mut seen = 0;
        let e = layered
            .for_range(&[], None, &mut |_, _| {
                seen += 1;
                if seen == 3 { Err(Error::Storage("stop".into())) } else { Ok(true) }
            })
            .unwrap_err();
        assert_eq!(seen, 3);
        assert!(e.to_string().contains("stop"), "{e}");
    }

    #[test]
    fn bytes_follow_what_the_maps_hold() {
        let mut m = Mem::default();
        m.set(Table::Cells, b"a".to_vec(), Some(vec![0; 10]));
        m.set(Table::Cells, b"a".to_vec(), Some(vec![0; 4]));
        m.set(Table::Meta, b"b".to_vec(), None);
        let counted = m.bytes();
        m.recount();
        assert_eq!(counted, m.bytes());
        let mut older = Mem::default();
        older.set(Table::Cells, b"a".to_vec(), None);
        older.set(Table::Notify, b"c".to_vec(), Some(vec![1]));
        let cells = CellFilter::hashes(m.table(Table::Cells).keys());
        older.absorb(m, &cells);
        assert_eq!(older.table(Table::Cells).get(b"a".as_slice()), Some(&Some(vec![0; 4])));
        let counted = older.bytes();
        older.recount();
        assert_eq!(counted, older.bytes());
    }

    /// A version key of cell `c` (of a few rows and columns, rows sharing long prefixes):
    /// kind and timestamp from `v`.
    fn version_key(c: u64, v: u64) -> Vec<u8> {
        let cell = crate::key::cell_prefix(
            "pages",
            // Some rows hold zero bytes (escaped in the key): their prefixes are found the same.
            format!("https://site.example/docs/{}{}", c / 3, if c.is_multiple_of(2) { "\0x" } else { "" }).as_bytes(),
            &format!("doc:{}", c % 3),
        );
        crate::key::version_key(
            &cell,
            [crate::key::Kind::Lock, crate::key::Kind::Write, crate::key::Kind::Data][(v % 3) as usize],
            crate::timestamp::Timestamp::from_raw(v / 3 + 1),
        )
    }

    /// No false negatives: every cell noted is reported as maybe held, also cells noted in
    /// several batches; at a tenth of the cells it is sized for, few false positives. A key
    /// that is not a version key makes it exclude nothing.
    #[test]
    fn a_cell_filter_never_forgets_a_cell_and_rarely_invents_one() {
        let mut filter = CellFilter::new(100_000);
        let cell = |n: u64| {
            crate::key::cell_prefix("index", format!("term{n} https://site.example/p{}", n * 7).as_bytes(), "hit:count")
        };
        let keys: Vec<Vec<u8>> = (0..10_000).map(|n| version_key(n, n)).collect();
        for batch in keys.chunks(777) {
            filter.note(&CellFilter::hashes(batch));
        }
        for n in 0..10_000 {
            let k = version_key(n, 0);
            assert!(filter.may_hold(&k[..crate::key::cell_prefix_len(&k).unwrap()]), "cell {n} forgotten");
        }
        let false_positives = (0..10_000).filter(|&n| filter.may_hold(&cell(n))).count();
        assert!(false_positives < 100, "{false_positives} of 10,000 absent cells reported as held");
        filter.note(&CellFilter::hashes(&[b"not a version key".to_vec()]));
        assert!((0..100).all(|n| filter.may_hold(&cell(n))));
    }

    /// Random layers of version keys with filters (filled by absorbing rounds, and one by
    /// setting keys) over a random base, read through [`Layered`] against the model: gets, one
    /// cell's ranges (which the filters may skip layers for) and ranges across cells. Fails if
    /// a filter skips a layer holding a key of the range.
    #[test]
    fn layered_reads_with_cell_filters_equal_the_layers_applied_in_order() {
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        for _ in 0..100 {
            let base: BTreeMap<Vec<u8>, Vec<u8>> = (0..rng.below(40))
                .map(|_| (version_key(rng.below(30), rng.below(12)), vec![0, rng.below(255) as u8]))
                .collect();
            let mut layers = [Mem::filtered(), Mem::filtered(), Mem::filtered()];
            let mut model = base.clone();
            for (l, layer) in layers.iter_mut().enumerate().rev() {
                let mut round = Mem::default();
                for _ in 0..rng.below(20) {
                    let k = version_key(rng.below(30), rng.below(12));
                    let v = (rng.below(3) > 0).then(|| vec![1, rng.below(255) as u8]);
                    round.set(Table::Cells, k, v);
                }
                for (k, v) in round.table(Table::Cells) {
                    match v {
                        Some(v) => model.insert(k.clone(), v.clone()),
                        None => model.remove(k),
                    };
                }
                if l == 1 {
                    // Set one by one (each noted in the filter as it goes in).
                    for (k, v) in round.table(Table::Cells) {
                        layer.set(Table::Cells, k.clone(), v.clone());
                    }
                } else {
                    let hashes = CellFilter::hashes(round.table(Table::Cells).keys());
                    layer.absorb(round, &hashes);
                }
            }
            let base = Base(base);
            let layered = Layered {
                layers: [
                    Some(layers[0].table(Table::Cells)),
                    Some(layers[1].table(Table::Cells)),
                    Some(layers[2].table(Table::Cells)),
                ],
                filters: [layers[0].cell_filter(), layers[1].cell_filter(), layers[2].cell_filter()],
                base: &base,
            };
            for c in 0..30 {
                for v in 0..12 {
                    let k = version_key(c, v);
                    assert_eq!(layered.get(&k).unwrap(), model.get(&k).cloned());
                    // From this key to each later key of the cell, and to the next cell's.
                    for to in (v + 1..13).map(|w| version_key(c, w)).chain([version_key(c + 1, 0)]) {
                        let mut got = Vec::new();
                        layered
                            .for_range(&k, Some(&to), &mut |k, v| {
                                got.push((k.to_vec(), v.to_vec()));
                                Ok(true)
                            })
                            .unwrap();
                        let want: Vec<(Vec<u8>, Vec<u8>)> = if k < to {
                            model.range(k.clone()..to.clone()).map(|(k, v)| (k.clone(), v.clone())).collect()
                        } else {
                            Vec::new() // inverted: version keys sort by kind, then newest first
                        };
                        assert_eq!(got, want);
                    }
                }
            }
        }
    }
}
