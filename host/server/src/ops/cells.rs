//! Reading cells (`get`, `scan` a page at a time) and notifying existing rows (`notify`).

use percolator_api::endpoint::{Get, Notify, Scan};
use percolator_api::text::{hex, unhex};
use percolator_api::{
    ApiError, ApiResult, GetRequest, LOADS_TABLE, MAX_SCAN_LIMIT, NotifyRequest, NotifyResponse, ScanCell, ScanRequest,
    ScanResponse, Value,
};
use percolator_store::{Store, TimedEntry, Timestamp, Transaction, prefix_end};

use super::{Context, Op};

/// Checks a table name (what the store accepts: 1 to 255 bytes, no control characters).
pub fn check_table(table: &str) -> ApiResult<()> {
    percolator_store::validate_table(table).map_err(ApiError::from)
}

/// Checks a column name (not empty, not in the reserved `__` namespace).
pub fn check_column(column: &str) -> ApiResult<()> {
    percolator_store::validate_column(column).map_err(ApiError::from)
}

/// Checks a row key: not empty (a load refuses an empty key too), at most 4096 bytes.
pub fn check_row(row: &str) -> ApiResult<()> {
    if row.is_empty() {
        return Err(ApiError::bad_input("the row key is empty"));
    }
    percolator_store::validate_row(row.as_bytes()).map_err(ApiError::from)
}

impl Op for Get {
    /// Reads one cell; a missing value is not found (`table/row/column: no value`), saying so
    /// when the whole table is empty (a mistyped table name) and naming the row's columns when
    /// the column has no family (`title` for `doc:title`).
    fn run(cx: &Context, r: GetRequest) -> ApiResult<Value> {
        check_table(&r.table)?;
        check_row(&r.row)?;
        check_column(&r.column)?;
        let txn = begin(&cx.store, r.at)?;
        if let Some((v, ts)) = txn.get_timed(&r.table, r.row.as_bytes(), &r.column)? {
            return Ok(Value {
                value: String::from_utf8_lossy(&v).into_owned(),
                value_hex: hex(&v),
                commit_ts: ts.map_or(0, Timestamp::raw),
            });
        }
        if !r.column.contains(':') {
            return Err(ApiError::bad_input(no_family(&txn, &r)?));
        }
        let empty = txn.scan(&r.table, b"", None, None, 1)?.is_empty();
        let hint = if empty { format!(" (table {:?} has no cells at all)", r.table) } else { String::new() };
        Err(ApiError::not_found(format!("{}/{}/{}: no value{hint}", r.table, r.row, r.column)))
    }
}

/// A read-only transaction at snapshot `at`, or at the latest.
fn begin(store: &Store, at: Option<u64>) -> ApiResult<Transaction> {
    Ok(match at {
        Some(ts) => store.begin_at(Timestamp::from_raw(ts))?,
        None => store.begin()?,
    })
}

/// The most columns of a row listed when a column is mistyped.
const COLUMNS_LISTED: usize = 20;

/// Why `r.column` (no `family:`) found nothing, with the row's columns that it may have meant.
fn no_family(txn: &Transaction, r: &GetRequest) -> ApiResult<String> {
    let mut row_end = r.row.as_bytes().to_vec();
    row_end.push(0);
    let cells = txn.scan(&r.table, r.row.as_bytes(), Some(&row_end), None, 1000)?;
    let columns: Vec<&str> = cells.iter().map(|c| c.column.as_str()).collect();
    let meant: Vec<&str> =
        columns.iter().copied().filter(|c| c.split_once(':').is_some_and(|(_, q)| q == r.column)).collect();
    let mut m =
        format!("column {:?} has no family: columns are named family:qualifier (e.g. doc:{})", r.column, r.column);
    if !meant.is_empty() {
        m.push_str(&format!("; did you mean {}?", meant.join(" or ")));
    } else if columns.is_empty() {
        m.push_str(&format!("; row {:?} of {} has no cells", r.row, r.table));
    } else {
        let more = columns.len().saturating_sub(COLUMNS_LISTED);
        let listed: Vec<&str> = columns.iter().copied().take(COLUMNS_LISTED).collect();
        m.push_str(&format!("; row {:?} of {} has {}", r.row, r.table, listed.join(", ")));
        if more > 0 {
            m.push_str(&format!(" and {more} more"));
        }
    }
    Ok(m)
}

/// A scan's resume token: the scan's snapshot and the last cell of a page,
/// `ts.hex(row).hex(column)`.
fn encode_token(ts: u64, row: &[u8], column: &str) -> String {
    format!("{ts}.{}.{}", hex(row), hex(column.as_bytes()))
}

/// The snapshot, row and column of a resume token. A token of the earlier form (`hex.hex`,
/// without a snapshot) is refused: its scan read a snapshot per page.
fn decode_token(token: &str) -> ApiResult<(u64, Vec<u8>, String)> {
    let bad = || {
        ApiError::bad_input(format!(
            "resume token {token:?} is not one a scan answered (pass the `next` of the previous page as `after`)"
        ))
    };
    let parts: Vec<&str> = token.split('.').collect();
    let (ts, row, column) = match parts[..] {
        [ts, row, column] => (ts, row, column),
        [row, column] if unhex(row).is_some() && unhex(column).is_some() => {
            return Err(ApiError::bad_input(format!(
                "resume token {token:?} is from an earlier version, whose scans read a new snapshot per page; \
                 start the scan again (its tokens keep one snapshot)"
            )));
        }
        _ => return Err(bad()),
    };
    let ts = ts.parse::<u64>().ok().filter(|ts| *ts > 0).ok_or_else(bad)?;
    let row = unhex(row).ok_or_else(bad)?;
    let column = unhex(column).and_then(|c| String::from_utf8(c).ok()).ok_or_else(bad)?;
    Ok((ts, row, column))
}

impl Op for Scan {
    /// Cells of a table in (row, column) order, at most `limit`; `next` resumes after the last.
    fn run(cx: &Context, r: ScanRequest) -> ApiResult<ScanResponse> {
        if r.limit == 0 {
            return Err(ApiError::bad_input("limit must be at least 1"));
        }
        if r.limit > MAX_SCAN_LIMIT {
            return Err(ApiError::bad_input(format!(
                "limit {} is more than the maximum of {MAX_SCAN_LIMIT} cells a page; read on with the `next` token",
                r.limit
            )));
        }
        check_table(&r.table)?;
        let (mut start, end) = row_range(&r.start, &r.end, &r.prefix)?;
        if let Some(cols) = &r.columns {
            if cols.is_empty() {
                return Err(ApiError::bad_input("the list of columns is empty"));
            }
            for c in cols {
                check_column(c)?;
            }
        }
        let after = r.after.as_deref().map(decode_token).transpose()?;
        let at = match (&after, r.at) {
            (Some((token, ..)), Some(at)) if *token != at => {
                return Err(ApiError::bad_input(format!(
                    "the resume token continues a scan of snapshot {token}, not of `at` {at}: every page of a scan \
                     reads the first page's snapshot (drop `at`, or start the scan again)"
                )));
            }
            (Some((token, ..)), _) => Some(*token),
            (None, at) => at,
        };
        let after = after.map(|(_, row, column)| (row, column));
        if let Some((row, _)) = &after
            && *row > start
        {
            start.clone_from(row);
        }
        let txn = begin(&cx.store, at)?;
        let snapshot = txn.start_ts().raw();
        if end.as_ref().is_some_and(|e| *e <= start) {
            return Ok(ScanResponse { at: snapshot, cells: Vec::new(), truncated: false, next: None });
        }
        let columns: Option<Vec<&str>> = r.columns.as_ref().map(|c| c.iter().map(String::as_str).collect());
        // Cells of the resume row up to the token's column were answered before: skip them. A
        // row may hold more of them than a page, so read more until a page is left after them.
        let mut want = r.limit.saturating_add(1);
        let mut cells = loop {
            let mut cells = txn.scan_timed(&r.table, &start, end.as_deref(), columns.as_deref(), want)?;
            let full = cells.len() == want;
            let skip = match &after {
                Some((row, column)) => {
                    cells.iter().take_while(|c| c.entry.row == *row && c.entry.column <= *column).count()
                }
                None => 0,
            };
            cells.drain(..skip);
            if cells.len() > r.limit || !full {
                break cells;
            }
            want = want.saturating_add(skip);
        };
        let truncated = cells.len() > r.limit;
        cells.truncate(r.limit);
        let next = match cells.last() {
            Some(last) if truncated => Some(encode_token(snapshot, &last.entry.row, &last.entry.column)),
            _ => None,
        };
        Ok(ScanResponse { at: snapshot, cells: cells.iter().map(scan_cell).collect(), truncated, next })
    }
}

/// The rows `[start, end)` that start with `prefix`, as a scan takes them (`end = None`: to the
/// end of the table). Refuses a `start` that is not before `end`.
fn row_range(
    start: &Option<String>,
    end: &Option<String>,
    prefix: &Option<String>,
) -> ApiResult<(Vec<u8>, Option<Vec<u8>>)> {
    if let (Some(start), Some(end)) = (start, end)
        && start >= end
    {
        return Err(ApiError::bad_input(format!(
            "the range is empty: start {start:?} is not before end {end:?} (the end is exclusive)"
        )));
    }
    let mut from = start.clone().unwrap_or_default().into_bytes();
    let mut to = end.clone().map(String::into_bytes);
    if let Some(p) = prefix {
        let p = p.as_bytes();
        if from.as_slice() < p {
            from = p.to_vec();
        }
        if let Some(pe) = prefix_end(p)
            && to.as_ref().is_none_or(|e| *e > pe)
        {
            to = Some(pe);
        }
    }
    Ok((from, to))
}

impl Op for Notify {
    const WRITES: bool = true;

    /// Notifies the observers of `table/column` of every row in the range that has a value
    /// (`Store::notify_existing`): a binding added later runs on the data written before it;
    /// with `rerun`, a strong observer runs even where it acknowledged the row's newest write
    /// (`Store::rerun_existing`): a new version of it recomputes its output on old rows.
    fn run(cx: &Context, r: NotifyRequest) -> ApiResult<NotifyResponse> {
        check_table(&r.table)?;
        check_column(&r.column)?;
        if r.table == LOADS_TABLE {
            return Err(ApiError::bad_input(format!(
                "table {LOADS_TABLE:?} holds load checkpoints and has no observers"
            )));
        }
        let (start, end) = row_range(&r.start, &r.end, &r.prefix)?;
        if end.as_ref().is_some_and(|e| *e <= start) {
            return Ok(NotifyResponse { notified: 0 });
        }
        let notified = if r.rerun {
            cx.store.rerun_existing(&r.table, &r.column, &start, end.as_deref())?
        } else {
            cx.store.notify_existing(&r.table, &r.column, &start, end.as_deref())?
        };
        Ok(NotifyResponse { notified })
    }
}

fn scan_cell(t: &TimedEntry) -> ScanCell {
    let e = &t.entry;
    ScanCell {
        row: String::from_utf8_lossy(&e.row).into_owned(),
        row_hex: hex(&e.row),
        column: e.column.clone(),
        value: String::from_utf8_lossy(&e.value).into_owned(),
        value_hex: hex(&e.value),
        commit_ts: t.commit_ts.map_or(0, Timestamp::raw),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_and_bad_ones_are_refused() {
        let t = encode_token(17, b"a\xffb", "doc:t.x");
        assert_eq!(decode_token(&t).unwrap(), (17, b"a\xffb".to_vec(), "doc:t.x".to_owned()));
        for bad in ["", "zz.00", "00", "0.00", "x.61.61", "0.61.61", "1.zz.61", "1.61.ff", "1.2.3.4"] {
            assert!(decode_token(bad).unwrap_err().message.contains("is not one a scan answered"), "{bad}");
        }
        let old = decode_token("61.6162").unwrap_err().message;
        assert!(old.contains("from an earlier version") && old.contains("start the scan again"), "{old}");
    }
}
