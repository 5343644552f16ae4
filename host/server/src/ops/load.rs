//! Loads: where the load of a file stands, and one batch written with its checkpoint.

use std::collections::BTreeMap;

use percolator_api::endpoint::{Load, LoadBegin};
use percolator_api::text::plural;
use percolator_api::{
    self as api, ApiError, ApiResult, LOAD_FILE, LOAD_LINES, LOAD_OPTIONS, LOAD_TOTAL, LOADS_TABLE, LoadBatch,
    LoadPlan, LoadProgress, LoadState,
};
use percolator_store::{NotifyKind, ScanEntry, Store, Transaction, prefix_end};

use super::cells::{check_column, check_row, check_table};
use super::{Context, Op};

/// One generation of a load, as its checkpoint row says.
struct Checkpoint {
    id: String,
    generation: u64,
    lines: u64,
    total: u64,
    options: String,
}

/// Loads go into any valid table but [`LOADS_TABLE`], which holds their checkpoints.
fn check_load_table(table: &str) -> ApiResult<()> {
    check_table(table)?;
    if table == LOADS_TABLE {
        return Err(ApiError::bad_input(format!(
            "table {LOADS_TABLE} holds the checkpoints of loads and cannot be loaded into; pick another table"
        )));
    }
    Ok(())
}

fn check_load_id(id: &str, generations: bool) -> ApiResult<()> {
    let (base, generation) = match id.split_once('-') {
        Some((b, g)) if generations => (b, Some(g)),
        _ => (id, None),
    };
    let hex_ok = base.len() == 32 && base.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    let gen_ok = generation.is_none_or(|g| g.parse::<u64>().is_ok_and(|g| g > 0));
    if hex_ok && gen_ok {
        Ok(())
    } else {
        Err(ApiError::bad_input(format!("load id {id:?} is not 32 lowercase hex digits (and -N for a repeated load)")))
    }
}

fn parse_count(txn: &Transaction, id: &str, column: &str) -> ApiResult<Option<u64>> {
    match txn.get(LOADS_TABLE, id, column)? {
        None => Ok(None),
        Some(v) => String::from_utf8_lossy(&v)
            .parse()
            .map(Some)
            .map_err(|_| ApiError::store(format!("{LOADS_TABLE}/{id}/{column} is not a number"))),
    }
}

/// Where the load of a file stands: new, interrupted (resume at the checkpoint) or done.
/// Writes nothing.
impl Op for LoadBegin {
    const WRITES: bool = true;

    fn run(cx: &Context, r: api::LoadBeginRequest) -> ApiResult<LoadPlan> {
        load_begin(&cx.store, &r)
    }
}

impl Op for Load {
    const WRITES: bool = true;

    fn run(cx: &Context, b: LoadBatch) -> ApiResult<LoadProgress> {
        load_batch(&cx.store, &b)
    }
}

fn load_begin(store: &Store, r: &api::LoadBeginRequest) -> ApiResult<LoadPlan> {
    check_load_table(&r.table)?;
    check_load_id(&r.id, false)?;
    for column in &r.columns {
        check_column(column)?;
    }
    for spec in store.observers() {
        if spec.kind == NotifyKind::Weak && spec.table == r.table && r.columns.contains(&spec.column) {
            return Err(ApiError::bad_input(format!(
                "column {}/{} is bound to the weak-notify observer {}: it can be notified, not written",
                spec.table, spec.column, spec.name
            )));
        }
    }
    let txn = store.begin()?;
    let end = prefix_end(r.id.as_bytes());
    let cells = txn.scan(LOADS_TABLE, r.id.as_bytes(), end.as_deref(), None, 100_000)?;
    let mut rows: BTreeMap<Vec<u8>, Vec<&ScanEntry>> = BTreeMap::new();
    for c in &cells {
        rows.entry(c.row.clone()).or_default().push(c);
    }
    let mut latest: Option<Checkpoint> = None;
    for (row, cells) in rows {
        let id = String::from_utf8_lossy(&row).into_owned();
        let generation = match id.strip_prefix(&r.id) {
            Some("") => 0,
            Some(rest) => match rest.strip_prefix('-').and_then(|g| g.parse::<u64>().ok()) {
                Some(g) => g,
                None => continue,
            },
            None => continue,
        };
        let field = |name: &str| cells.iter().find(|c| c.column == name).map(|c| String::from_utf8_lossy(&c.value));
        let number = |name: &str| -> ApiResult<u64> {
            field(name)
                .unwrap_or_default()
                .parse()
                .map_err(|_| ApiError::store(format!("{LOADS_TABLE}/{id}/{name} is missing or not a number")))
        };
        let cp = Checkpoint {
            lines: number(LOAD_LINES)?,
            total: number(LOAD_TOTAL)?,
            options: field(LOAD_OPTIONS).unwrap_or_default().into_owned(),
            id,
            generation,
        };
        if latest.as_ref().is_none_or(|l| l.generation < cp.generation) {
            latest = Some(cp);
        }
    }
    let new = |generation: u64| LoadPlan {
        id: if generation == 0 { r.id.clone() } else { format!("{}-{generation}", r.id) },
        start: 0,
        total: r.total,
        state: LoadState::New,
    };
    let Some(cp) = latest else { return Ok(new(0)) };
    let same = cp.options == r.options && cp.total == r.total;
    // What differs, when something does: the options, else the record count.
    let other = if cp.options != r.options {
        format!("other options ({}; now {})", cp.options, r.options)
    } else {
        format!("another record count ({}; now {})", cp.total, r.total)
    };
    if cp.lines >= cp.total {
        if r.again {
            return Ok(new(cp.generation + 1));
        }
        if !same {
            return Err(ApiError::bad_input(format!(
                "{} was loaded into {} with {other}; pass --again to load it with these",
                r.file, r.table
            )));
        }
        return Ok(LoadPlan { id: cp.id, start: cp.lines, total: cp.total, state: LoadState::Done });
    }
    if same {
        return Ok(LoadPlan { id: cp.id, start: cp.lines, total: cp.total, state: LoadState::Resume });
    }
    if r.again {
        return Ok(new(cp.generation + 1));
    }
    Err(ApiError::bad_input(format!(
        "{} was being loaded into {} with {other} and stopped at record {} of {}; \
         run the load with those options to finish it, or pass --again to start over",
        r.file, r.table, cp.lines, cp.total
    )))
}

/// Writes one batch of a load and its checkpoint in one transaction, unless the checkpoint is
/// already past it (then nothing is written: a repeated batch is harmless).
fn load_batch(store: &Store, b: &LoadBatch) -> ApiResult<LoadProgress> {
    check_load_table(&b.table)?;
    check_load_id(&b.id, true)?;
    if b.records.is_empty() {
        return Err(ApiError::bad_input("a load batch needs at least one record"));
    }
    let end = b.start.saturating_add(b.records.len() as u64);
    if end > b.total {
        return Err(ApiError::bad_input(format!(
            "batch of records {}..{} is past the end of the file ({})",
            b.start,
            end,
            plural(b.total, "record", "records")
        )));
    }
    // Every row, column and value checked first: a bad one fails the batch before anything is
    // written.
    let mut values = Vec::with_capacity(b.records.len());
    for (i, record) in b.records.iter().enumerate() {
        let at = || format!("record {} of {} (row {:?})", b.start + i as u64 + 1, b.file, record.row);
        check_row(&record.row).map_err(|e| ApiError::bad_input(format!("{}: {e}", at())))?;
        let mut cells = Vec::with_capacity(record.cells.len());
        for (column, value) in &record.cells {
            check_column(column).map_err(|e| ApiError::bad_input(format!("{}: {e}", at())))?;
            let bytes = value
                .as_ref()
                .map(|v| v.to_bytes())
                .transpose()
                .map_err(|e| ApiError::bad_input(format!("{}, column {column}: {e}", at())))?;
            cells.push(bytes);
        }
        values.push(cells);
    }
    let mut behind = None;
    let outcome = store.run(|t| {
        behind = None;
        let done = match parse_count(t, &b.id, LOAD_LINES) {
            Ok(d) => d.unwrap_or(0),
            Err(e) => return Err(percolator_store::Error::Corrupt(e.message)),
        };
        if done >= end {
            return Ok((done, 0));
        }
        if done < b.start {
            behind = Some(done);
            return Ok((done, 0));
        }
        let first = (done - b.start) as usize;
        for (record, values) in b.records[first..].iter().zip(&values[first..]) {
            for ((column, _), value) in record.cells.iter().zip(values) {
                match value {
                    Some(v) => t.set(&b.table, record.row.as_bytes(), column, v.as_ref())?,
                    None => t.delete(&b.table, record.row.as_bytes(), column)?,
                }
            }
        }
        t.set(LOADS_TABLE, &b.id, LOAD_LINES, end.to_string())?;
        t.set(LOADS_TABLE, &b.id, LOAD_TOTAL, b.total.to_string())?;
        t.set(LOADS_TABLE, &b.id, LOAD_FILE, b.file.as_bytes())?;
        t.set(LOADS_TABLE, &b.id, LOAD_OPTIONS, b.options.as_bytes())?;
        Ok((end, end - done))
    });
    let (done, written) = outcome.map_err(|e| {
        let mut e = ApiError::from(e);
        e.message = format!("loading records {}..{} of {}: {}", b.start + 1, end, b.file, e.message);
        e
    })?;
    if let Some(done) = behind {
        return Err(ApiError::bad_input(format!(
            "load {} of {} has {} in, but this batch starts at record {}: run the load again to resume it",
            b.id,
            b.file,
            plural(done, "record", "records"),
            b.start
        )));
    }
    Ok(LoadProgress { done, total: b.total, skipped: written == 0, written })
}
