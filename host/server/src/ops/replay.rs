//! `replay`: a dry run of a candidate version of a binding's component. The candidate and the
//! current version each run on the same rows, each in a transaction that is never committed;
//! what their transactions would write is compared cell by cell. Nothing is written (reads
//! may still resolve other transactions' abandoned locks, as every read does).

use std::collections::BTreeMap;
use std::path::Path;

use percolator_api::endpoint::Replay;
use percolator_api::text::hex;
use percolator_api::{
    ApiError, ApiResult, CellChange, DEFAULT_REPLAY_ROWS, MAX_REPLAY_ROWS, ReplayReport, ReplayRequest, RowReplay,
};
use percolator_runtime::{Limits, Runtime, WasmObserver};
use percolator_store::{CellRef, Notification, ObserveError, Observer, Store};

use super::{Context, Op, check_row};
use crate::config::Binding;

/// Largest candidate component read, in bytes (the Python and JavaScript toolchains' output is
/// 12–20 MB).
const MAX_COMPONENT_BYTES: u64 = 256 << 20;

/// Longest value shown in a change, in bytes (the rest is counted).
const PREVIEW_BYTES: usize = 1024;

impl Op for Replay {
    fn run(cx: &Context, r: ReplayRequest) -> ApiResult<ReplayReport> {
        let limit = r.limit.unwrap_or(DEFAULT_REPLAY_ROWS);
        if !(1..=MAX_REPLAY_ROWS).contains(&limit) {
            return Err(ApiError::bad_input(format!("limit {limit} is out of range 1..={MAX_REPLAY_ROWS}")));
        }
        if r.rows.len() > MAX_REPLAY_ROWS as usize {
            return Err(ApiError::bad_input(format!("{} rows: at most {MAX_REPLAY_ROWS} per replay", r.rows.len())));
        }
        for row in &r.rows {
            check_row(row)?;
        }
        match &cx.host {
            Some(h) => {
                let (binding, current) =
                    h.pipeline.loaded(&r.binding).ok_or_else(|| unknown(&r.binding, h.pipeline.names()))?;
                let current = current.detached(&format!("{} (current)", binding.name));
                replay(&cx.store, h.pipeline.runtime(), &binding, current, &r, limit)
            }
            None => {
                let Some(config) = &cx.config else {
                    return Err(ApiError::bad_input(
                        "replay needs the binding's configuration, which does not load: fix it first",
                    ));
                };
                let names = config.bindings.iter().map(|b| b.name.clone()).collect();
                let binding =
                    config.bindings.iter().find(|b| b.name == r.binding).ok_or_else(|| unknown(&r.binding, names))?;
                let runtime =
                    Runtime::new(Some(config.cache_dir.clone())).map_err(|e| ApiError::store(format!("{e:#}")))?;
                let compiled = runtime.compile_file(&binding.wasm).map_err(|e| {
                    ApiError::bad_input(format!("the binding's current component does not load: {e:#}"))
                })?;
                let current = runtime.observer(
                    &format!("{} (current)", binding.name),
                    &compiled,
                    binding.access.clone(),
                    Limits { pool: 1, ..binding.limits },
                    binding.env.clone(),
                );
                replay(&cx.store, &runtime, binding, current, &r, limit)
            }
        }
    }
}

fn unknown(name: &str, names: Vec<String>) -> ApiError {
    let known = if names.is_empty() { "there are none".to_owned() } else { format!("they are {}", names.join(", ")) };
    ApiError::not_found(format!("no binding is named {name:?}; {known}"))
}

fn replay(
    store: &Store,
    runtime: &Runtime,
    binding: &Binding,
    current: WasmObserver,
    r: &ReplayRequest,
    limit: u32,
) -> ApiResult<ReplayReport> {
    // Only a regular file of a bounded size: the path comes from a request (a device or a FIFO
    // would never end).
    let path = Path::new(&r.wasm);
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() && m.len() <= MAX_COMPONENT_BYTES => {}
        Ok(m) if m.is_file() => {
            return Err(ApiError::bad_input(format!(
                "the candidate {} is {} bytes: at most {MAX_COMPONENT_BYTES}",
                path.display(),
                m.len()
            )));
        }
        Ok(_) => return Err(ApiError::bad_input(format!("the candidate {} is not a regular file", path.display()))),
        Err(e) => return Err(ApiError::bad_input(format!("the candidate {}: {e}", path.display()))),
    }
    let compiled =
        runtime.compile_file(path).map_err(|e| ApiError::bad_input(format!("the candidate does not load: {e:#}")))?;
    let candidate = runtime.observer(
        &format!("{} (candidate)", binding.name),
        &compiled,
        binding.access.clone(),
        Limits { pool: 1, ..binding.limits },
        binding.env.clone(),
    );
    candidate
        .check_instantiates()
        .map_err(|e| ApiError::bad_input(format!("the candidate cannot start under the binding's limits: {e:#}")))?;
    let rows: Vec<Vec<u8>> = if r.rows.is_empty() {
        let txn = store.begin()?;
        let column = [binding.column.as_str()];
        txn.scan(&binding.table, b"", None, Some(&column), limit as usize)?.into_iter().map(|c| c.row).collect()
    } else {
        r.rows.iter().map(|row| row.as_bytes().to_vec()).collect()
    };
    let mut report = ReplayReport {
        binding: binding.name.clone(),
        table: binding.table.clone(),
        column: binding.column.clone(),
        current_hash: current.source_hash().to_owned(),
        candidate_hash: candidate.source_hash().to_owned(),
        rows: Vec::new(),
        changed_rows: 0,
        identical_rows: 0,
        cells_added: 0,
        cells_changed: 0,
        cells_removed: 0,
    };
    for row in rows {
        let n = Notification {
            cell: CellRef::new(binding.table.clone(), row.clone(), binding.column.clone()),
            kind: binding.kind,
            commit_ts: None,
            attempt: 1,
        };
        let (current_writes, current_error) = dry_run(store, &current, &n)?;
        let (candidate_writes, candidate_error) = dry_run(store, &candidate, &n)?;
        let mut out = RowReplay {
            row: String::from_utf8_lossy(&row).into_owned(),
            row_hex: hex(&row),
            current_error,
            candidate_error,
            cells: Vec::new(),
            identical_cells: 0,
        };
        let mut cells: Vec<&CellRef> = current_writes.keys().chain(candidate_writes.keys()).collect();
        cells.sort();
        cells.dedup();
        for cell in cells {
            let (a, b) = (current_writes.get(cell), candidate_writes.get(cell));
            let change = match (a, b) {
                (Some(x), Some(y)) if x == y => {
                    out.identical_cells += 1;
                    continue;
                }
                (Some(_), Some(_)) => {
                    report.cells_changed += 1;
                    "changed"
                }
                (None, Some(_)) => {
                    report.cells_added += 1;
                    "added"
                }
                (Some(_), None) => {
                    report.cells_removed += 1;
                    "removed"
                }
                (None, None) => continue,
            };
            out.cells.push(CellChange {
                change: change.to_owned(),
                table: cell.table.clone(),
                row: String::from_utf8_lossy(&cell.row).into_owned(),
                column: cell.column.clone(),
                current: a.map(|v| preview(v.as_deref())),
                candidate: b.map(|v| preview(v.as_deref())),
            });
        }
        let differs = !out.cells.is_empty() || out.current_error != out.candidate_error;
        if differs {
            report.changed_rows += 1;
        } else {
            report.identical_rows += 1;
        }
        report.rows.push(out);
    }
    Ok(report)
}

type Writes = BTreeMap<CellRef, Option<Vec<u8>>>;

/// Runs `observer` on `n` in a transaction that is dropped, never committed: what it would
/// write, or why it failed (a conflict is retried, as a host would, a few times).
fn dry_run(store: &Store, observer: &WasmObserver, n: &Notification) -> ApiResult<(Writes, Option<String>)> {
    let mut last = String::new();
    for _ in 0..5 {
        let mut txn = store.begin()?;
        match observer.observe(&mut txn, n) {
            Ok(()) => return Ok((txn.buffered_writes().clone(), None)),
            Err(ObserveError::Store(e)) if e.is_retryable() => last = e.to_string(),
            Err(ObserveError::Store(e)) => return Ok((Writes::new(), Some(e.to_string()))),
            Err(ObserveError::Failed(m)) => return Ok((Writes::new(), Some(m))),
        }
    }
    Ok((Writes::new(), Some(format!("kept conflicting: {last}"))))
}

/// A written value for people: its text (invalid UTF-8 replaced), at most [`PREVIEW_BYTES`];
/// a delete is `(deleted)`.
fn preview(v: Option<&[u8]>) -> String {
    let Some(v) = v else { return "(deleted)".to_owned() };
    let text = String::from_utf8_lossy(&v[..v.len().min(PREVIEW_BYTES)]).into_owned();
    if v.len() > PREVIEW_BYTES { format!("{text}… ({} bytes)", v.len()) } else { text }
}
