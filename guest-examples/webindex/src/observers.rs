//! The four observers of `docs/webindex.md`, generic over [`Txn`]: each guest crate exports one
//! of them with `percolator_guest::export_observer!`, and tests run them natively against
//! `percolator_guest::mem::MemStore`.
//!
//! | observer | bound to (`pages/…`) | writes | notifies (weak) |
//! |---|---|---|---|
//! | [`DocumentProcessor`] | `raw:html` | `doc:*` | `export:dirty` |
//! | [`Clustering`] | `doc:hash`, `raw:pagerank` | `clusters/*`, `cluster:*` | `export:dirty` |
//! | [`LinkInversion`] | `doc:links`; `pending/link:dirty` (weak), `cluster:canonical` | `inlinks/*`, `pending/*`, `link:out`; `fwd:to`, `index/*/anchor:count` | `pending/link:dirty` |
//! | [`Exporter`] | `export:dirty` (weak) | `index/*/hit:count`, `export:terms` | |
//!
//! The trigger columns `pending/link:dirty` (of a site) and `pages/export:dirty` are weak-notify
//! columns: never written, only notified with `Txn::notify_weak`, so runs that notify one
//! popular row (a site gaining links) do not conflict on it. Their runs may repeat; each is an idempotent
//! recomputation.
//!
//! Every observer works from whatever state it finds (a run may come before, after or between
//! the runs it depends on), writes only what differs from the output it recorded before, and
//! writes its serialization point (`canon:url` and `cluster:hash`, `link:out`, `fwd:to`,
//! `export:terms`) on every run that could change it (forwarding: on every run that changes
//! anything), as the specification's invariants require. Bad input (an
//! unparsable `raw:pagerank`, a row key that is not a normalized URL; `raw:html` in any
//! encoding is fine, see [`crate::charset`]) and unreadable values the pipeline wrote itself fail the run with [`Error::Failed`]
//! naming the cell.

mod clustering;
mod document_processor;
mod exporter;
mod link_inversion;
#[cfg(test)]
mod pipeline_tests;

pub use clustering::Clustering;
pub use document_processor::DocumentProcessor;
pub use exporter::Exporter;
pub use link_inversion::LinkInversion;

use percolator_guest::{Cell, Error, Notification, Result, Txn};

use crate::schema::{PAGES, prefix_range};

/// The most cells one scan or get-many may return (the host's limit per call).
const PAGE: usize = 10_000;

/// `table/row/column`, for messages.
fn cell_name(table: &str, row: &[u8], column: &str) -> String {
    format!("{table}/{}/{column}", String::from_utf8_lossy(row))
}

/// A failure about one cell's value: `table/row/column: message`.
fn bad_cell(table: &str, row: &[u8], column: &str, message: impl std::fmt::Display) -> Error {
    Error::Failed(format!("{}: {message}", cell_name(table, row, column)))
}

/// The notified row as a URL.
fn notified_url(n: &Notification) -> Result<&str> {
    std::str::from_utf8(n.row())
        .map_err(|_| Error::Failed(format!("{}: the row key is not UTF-8", cell_name(n.table(), n.row(), n.column()))))
}

/// Reads one text cell of each of `columns` in `pages/url`.
fn get_page<const N: usize>(txn: &impl Txn, url: &str, columns: [&str; N]) -> Result<[Option<String>; N]> {
    let cells: Vec<Cell> = columns.iter().map(|c| Cell::new(PAGES, url, *c)).collect();
    let values = txn.get_many(&cells)?;
    let mut out = [const { None }; N];
    for ((slot, value), column) in out.iter_mut().zip(values).zip(columns) {
        *slot = value.map(|v| text(PAGES, url.as_bytes(), column, v)).transpose()?;
    }
    Ok(out)
}

/// A value as UTF-8 text, or a failure naming its cell.
fn text(table: &str, row: &[u8], column: &str, value: Vec<u8>) -> Result<String> {
    String::from_utf8(value).map_err(|e| bad_cell(table, row, column, format_args!("not UTF-8: {e}")))
}

/// Decodes a value the pipeline wrote (absent: `""`), failing with the cell's name.
fn decode<'v, T>(
    table: &str,
    row: &[u8],
    column: &str,
    value: Option<&'v str>,
    decode: impl FnOnce(&'v str) -> std::result::Result<T, String>,
) -> Result<T> {
    decode(value.unwrap_or_default()).map_err(|e| bad_cell(table, row, column, e))
}

/// Every `column` value of the rows `"<prefix> <suffix>"` of `table`, as (suffix, value) in row
/// order, paging through scans of at most [`PAGE`] cells.
///
/// A scan may return fewer cells than asked for without the range being exhausted (the host
/// caps each call), so only an empty page ends the loop.
fn scan_prefix(txn: &impl Txn, table: &str, prefix: &str, column: &str) -> Result<Vec<(String, String)>> {
    let (mut start, end) = prefix_range(prefix);
    let mut out = Vec::new();
    loop {
        let page = txn.scan(table, &start, Some(&end), Some(&[column]), PAGE as u32)?;
        let Some(last) = page.last() else {
            return Ok(out);
        };
        // One column, so one cell per row: continue just after the last row.
        start = last.row.clone();
        start.push(0);
        for entry in page {
            let suffix = entry.row.get(prefix.len() + 1..).unwrap_or_default();
            let suffix = std::str::from_utf8(suffix)
                .map_err(|_| bad_cell(table, &entry.row, column, "the row key is not UTF-8"))?
                .to_owned();
            let value = text(table, &entry.row, column, entry.value)?;
            out.push((suffix, value));
        }
    }
}

/// Reads `column` of each of `rows` of `table`, in get-many calls of at most [`PAGE`] cells.
fn get_column<'r>(
    txn: &impl Txn,
    table: &str,
    rows: impl IntoIterator<Item = &'r [u8]>,
    column: &str,
) -> Result<Vec<Option<Vec<u8>>>> {
    let cells: Vec<Cell> = rows.into_iter().map(|row| Cell::new(table, row, column)).collect();
    let mut out = Vec::with_capacity(cells.len());
    for chunk in cells.chunks(PAGE) {
        out.extend(txn.get_many(chunk)?);
    }
    Ok(out)
}

/// Sets `value` or deletes (`None`), unconditionally.
fn put(txn: &mut impl Txn, table: &str, row: &[u8], column: &str, value: Option<&str>) -> Result<()> {
    match value {
        Some(v) => txn.set_str(table, row, column, v),
        None => txn.delete(table, row, column),
    }
}

/// Weakly notifies the trigger column `column` (`export:dirty`) of `pages/url`:
/// its observer runs after this transaction commits, on a snapshot that includes its writes.
fn notify(txn: &mut impl Txn, url: &str, column: &str) -> Result<()> {
    txn.notify_weak(PAGES, url.as_bytes(), column)
}

#[cfg(test)]
mod test_util {
    use percolator_guest::mem::MemStore;

    use crate::schema::{EXPORT_DIRTY, LINK_DIRTY, PAGES, PENDING};

    /// An empty store whose trigger columns are weak-notify, as `config/web-index.toml` binds
    /// them: writing one fails.
    pub(super) fn store() -> MemStore {
        let store = MemStore::new();
        store.bind_weak(PENDING, LINK_DIRTY);
        store.bind_weak(PAGES, EXPORT_DIRTY);
        store
    }

    /// Takes the weak notifications committed since the last call, which must all be of
    /// `<table>/<row>/column` (`pending/<site>/link:dirty`, else `pages/<url>/column`): the rows,
    /// sorted, each once.
    pub(super) fn take_notified(store: &MemStore, column: &str) -> Vec<String> {
        let table = if column == LINK_DIRTY { PENDING } else { PAGES };
        let mut urls: Vec<String> = store
            .take_weak_notifications()
            .into_iter()
            .map(|c| {
                assert_eq!((c.table.as_str(), c.column.as_str()), (table, column), "{c:?}");
                String::from_utf8(c.row).unwrap()
            })
            .collect();
        urls.sort();
        urls.dedup();
        urls
    }

    /// Every cell of `table` as `(row, column, value)` text.
    pub(super) fn dump(store: &MemStore, table: &str) -> Vec<(String, String, String)> {
        store
            .cells(table)
            .into_iter()
            .map(|(c, v)| (String::from_utf8(c.row).unwrap(), c.column, String::from_utf8(v).unwrap()))
            .collect()
    }

    /// `(row, value)` of every cell of `column` in `table`.
    pub(super) fn column(store: &MemStore, table: &str, column: &str) -> Vec<(String, String)> {
        dump(store, table).into_iter().filter(|(_, c, _)| c == column).map(|(r, _, v)| (r, v)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{INLINKS, LINK_ANCHOR, join_row};
    use percolator_guest::mem::MemStore;

    #[test]
    fn scan_prefix_pages_through_more_than_one_scan() {
        let store = MemStore::new();
        let n = PAGE + 5;
        for i in 0..n {
            store.put(INLINKS, join_row("t", &format!("s{i:06}")), LINK_ANCHOR, format!("{i}"));
        }
        store.put(INLINKS, join_row("t2", "x"), LINK_ANCHOR, "other target");
        store.put(INLINKS, join_row("s", "x"), LINK_ANCHOR, "other target");
        let txn = store.begin();
        let rows = scan_prefix(&txn, INLINKS, "t", LINK_ANCHOR).unwrap();
        assert_eq!(rows.len(), n);
        assert_eq!(rows[0], ("s000000".to_owned(), "0".to_owned()));
        assert_eq!(rows[n - 1], (format!("s{:06}", n - 1), format!("{}", n - 1)));
    }

    #[test]
    fn scan_prefix_reads_on_after_a_short_page() {
        let store = MemStore::new();
        for i in 0..10 {
            store.put(INLINKS, join_row("t", &format!("s{i}")), LINK_ANCHOR, format!("{i}"));
        }
        // A host that returns at most 3 cells per scan, whatever the limit.
        store.cap_scans(3);
        let txn = store.begin();
        let rows = scan_prefix(&txn, INLINKS, "t", LINK_ANCHOR).unwrap();
        let want: Vec<(String, String)> = (0..10).map(|i| (format!("s{i}"), format!("{i}"))).collect();
        assert_eq!(rows, want);
    }

    #[test]
    fn non_utf8_values_name_the_cell() {
        let store = MemStore::new();
        store.put(PAGES, "u", "doc:title", [0xff]);
        let txn = store.begin();
        let err = get_page(&txn, "u", ["doc:title"]).unwrap_err();
        assert!(matches!(&err, Error::Failed(m) if m.starts_with("pages/u/doc:title: not UTF-8")), "{err}");
    }
}
