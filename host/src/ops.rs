//! Every command-line verb that touches the store, implemented once as a function over a
//! [`Store`]. The HTTP handlers call these on the host's store; the command line calls them on
//! the store file when no host runs; either way the answer is the same [`api`](crate::api) type.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use percolator_store::{NotifyKind, ScanEntry, Store, Transaction};

use crate::api::*;
use crate::metrics::Sampler;
use crate::pipeline::Pipeline;

/// Pending notifications are counted up to this many (status, `/metrics`).
pub const BACKLOG_CAP: usize = 100_000;

/// The table holding load checkpoints (one row per load id).
pub const LOADS_TABLE: &str = "_loads";
/// Records of the file loaded so far (the checkpoint).
pub const LOAD_LINES: &str = "load:lines";
/// The file loaded.
pub const LOAD_FILE: &str = "load:file";
/// Records in the file.
pub const LOAD_TOTAL: &str = "load:total";
/// How the file is read (format, key field, family).
pub const LOAD_OPTIONS: &str = "load:options";

/// What kind of failure an [`OpError`] is (it picks the HTTP status).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The request is wrong (400).
    BadInput,
    /// The thing asked for does not exist (404).
    NotFound,
    /// A missing or wrong token (401).
    Unauthorized,
    /// Lost a race too many times (409); running it again may succeed.
    Conflict,
    /// The store failed (500).
    Store,
    /// The host cannot serve it: it could not be reached (client side), or it is shutting
    /// down (503).
    Unavailable,
}

/// The error of every operation: a kind and a message for people.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpError {
    /// What kind.
    pub kind: ErrorKind,
    /// What went wrong, complete (printed as is).
    pub message: String,
}

impl OpError {
    /// A bad-input error.
    pub fn bad_input(message: impl Into<String>) -> OpError {
        OpError { kind: ErrorKind::BadInput, message: message.into() }
    }

    /// A not-found error.
    pub fn not_found(message: impl Into<String>) -> OpError {
        OpError { kind: ErrorKind::NotFound, message: message.into() }
    }

    /// The host cannot serve the request (it is shutting down, or unreachable).
    pub fn unavailable(message: impl Into<String>) -> OpError {
        OpError { kind: ErrorKind::Unavailable, message: message.into() }
    }

    /// A store error.
    pub fn store(message: impl Into<String>) -> OpError {
        OpError { kind: ErrorKind::Store, message: message.into() }
    }
}

impl fmt::Display for OpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for OpError {}

impl From<OpError> for String {
    fn from(e: OpError) -> String {
        e.message
    }
}

impl From<percolator_store::Error> for OpError {
    fn from(e: percolator_store::Error) -> OpError {
        use percolator_store::Error as E;
        let kind = match e {
            // The message alone (`table name is empty`), without the error's kind.
            E::InvalidArgument(m) => return OpError::bad_input(m),
            E::NotFound(_) => ErrorKind::NotFound,
            E::Conflict { .. } => ErrorKind::Conflict,
            _ => ErrorKind::Store,
        };
        OpError { kind, message: e.to_string() }
    }
}

/// Result of an operation.
pub type OpResult<T> = Result<T, OpError>;

/// What a running host adds to the store: its pipeline and throughput samples.
pub struct HostContext {
    /// The running pipeline.
    pub pipeline: Arc<Pipeline>,
    /// Samples of the store's counters, for rates.
    pub sampler: Arc<Sampler>,
    /// The API's base URL.
    pub url: String,
    /// When the host started.
    pub started_at: SystemTime,
}

/// `GET /v1/health`.
pub fn health(store_path: &Path) -> Health {
    let store = std::fs::canonicalize(store_path).unwrap_or_else(|_| store_path.to_owned());
    Health { ok: true, version: env!("CARGO_PKG_VERSION").to_owned(), store: store.display().to_string() }
}

/// Checks a table name (what the store accepts: 1 to 255 bytes, no control characters).
pub fn check_table(table: &str) -> OpResult<()> {
    percolator_store::validate_table(table).map_err(OpError::from)
}

/// Checks a column name (`family:qualifier`, not in the reserved `__` namespace).
pub fn check_column(column: &str) -> OpResult<()> {
    percolator_store::validate_column(column).map_err(OpError::from)
}

/// Checks a row key: not empty (a load refuses an empty key too), at most 4096 bytes.
pub fn check_row(row: &str) -> OpResult<()> {
    if row.is_empty() {
        return Err(OpError::bad_input("the row key is empty"));
    }
    percolator_store::validate_row(row.as_bytes()).map_err(OpError::from)
}

/// Reads one cell; a missing value is [`ErrorKind::NotFound`] (`table/row/column: no value`,
/// saying so when the whole table is empty: a mistyped table name).
pub fn get(store: &Store, r: &GetRequest) -> OpResult<Value> {
    check_table(&r.table)?;
    check_row(&r.row)?;
    check_column(&r.column)?;
    let txn = store.begin()?;
    match txn.get(&r.table, r.row.as_bytes(), &r.column)? {
        Some(v) => Ok(Value { value: String::from_utf8_lossy(&v).into_owned(), value_hex: hex(&v) }),
        None => {
            let empty = txn.scan(&r.table, b"", None, None, 1)?.is_empty();
            let hint = if empty { format!(" (table {:?} has no cells at all)", r.table) } else { String::new() };
            Err(OpError::not_found(format!("{}/{}/{}: no value{hint}", r.table, r.row, r.column)))
        }
    }
}

/// The first row key after every key starting with `prefix` (`None`: no such key).
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

/// Scans cells of a table.
pub fn scan(store: &Store, r: &ScanRequest) -> OpResult<ScanResponse> {
    if r.limit == 0 {
        return Err(OpError::bad_input("limit must be at least 1"));
    }
    if r.limit > MAX_SCAN_LIMIT {
        return Err(OpError::bad_input(format!(
            "limit {} is more than the maximum of {MAX_SCAN_LIMIT} cells; scan again from the last row to read more",
            r.limit
        )));
    }
    check_table(&r.table)?;
    let (start, end) = row_range(&r.start, &r.end, &r.prefix)?;
    if let Some(cols) = &r.columns {
        if cols.is_empty() {
            return Err(OpError::bad_input("the list of columns is empty"));
        }
        for c in cols {
            check_column(c)?;
        }
    }
    if end.as_ref().is_some_and(|e| *e <= start) {
        return Ok(ScanResponse { cells: Vec::new(), truncated: false });
    }
    let columns: Option<Vec<&str>> = r.columns.as_ref().map(|c| c.iter().map(String::as_str).collect());
    let txn = store.begin()?;
    let mut cells = txn.scan(&r.table, &start, end.as_deref(), columns.as_deref(), r.limit.saturating_add(1))?;
    let truncated = cells.len() > r.limit;
    cells.truncate(r.limit);
    Ok(ScanResponse { cells: cells.iter().map(scan_cell).collect(), truncated })
}

/// The rows `[start, end)` that start with `prefix`, as a scan takes them (`end = None`: to the
/// end of the table). Refuses a `start` that is not before `end`.
fn row_range(
    start: &Option<String>,
    end: &Option<String>,
    prefix: &Option<String>,
) -> OpResult<(Vec<u8>, Option<Vec<u8>>)> {
    if let (Some(start), Some(end)) = (start, end)
        && start >= end
    {
        return Err(OpError::bad_input(format!(
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

/// Notifies the observers of `table/column` of every row in the range that has a value
/// ([`Store::notify_existing`]): a binding added later runs on the data written before it.
pub fn notify_existing(store: &Store, r: &NotifyRequest) -> OpResult<NotifyResponse> {
    check_table(&r.table)?;
    check_column(&r.column)?;
    if r.table == LOADS_TABLE {
        return Err(OpError::bad_input(format!("table {LOADS_TABLE:?} holds load checkpoints and has no observers")));
    }
    let (start, end) = row_range(&r.start, &r.end, &r.prefix)?;
    if end.as_ref().is_some_and(|e| *e <= start) {
        return Ok(NotifyResponse { notified: 0 });
    }
    let notified = store.notify_existing(&r.table, &r.column, &start, end.as_deref())?;
    Ok(NotifyResponse { notified })
}

fn scan_cell(e: &ScanEntry) -> ScanCell {
    ScanCell {
        row: String::from_utf8_lossy(&e.row).into_owned(),
        row_hex: hex(&e.row),
        column: e.column.clone(),
        value: String::from_utf8_lossy(&e.value).into_owned(),
        value_hex: hex(&e.value),
    }
}

/// One generation of a load, as its checkpoint row says.
struct Checkpoint {
    id: String,
    generation: u64,
    lines: u64,
    total: u64,
    options: String,
}

/// Loads go into any valid table but [`LOADS_TABLE`], which holds their checkpoints.
fn check_load_table(table: &str) -> OpResult<()> {
    check_table(table)?;
    if table == LOADS_TABLE {
        return Err(OpError::bad_input(format!(
            "table {LOADS_TABLE} holds the checkpoints of loads and cannot be loaded into; pick another table"
        )));
    }
    Ok(())
}

fn check_load_id(id: &str, generations: bool) -> OpResult<()> {
    let (base, generation) = match id.split_once('-') {
        Some((b, g)) if generations => (b, Some(g)),
        _ => (id, None),
    };
    let hex_ok = base.len() == 32 && base.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    let gen_ok = generation.is_none_or(|g| g.parse::<u64>().is_ok_and(|g| g > 0));
    if hex_ok && gen_ok {
        Ok(())
    } else {
        Err(OpError::bad_input(format!("load id {id:?} is not 32 lowercase hex digits (and -N for a repeated load)")))
    }
}

fn parse_count(txn: &Transaction, id: &str, column: &str) -> OpResult<Option<u64>> {
    match txn.get(LOADS_TABLE, id, column)? {
        None => Ok(None),
        Some(v) => String::from_utf8_lossy(&v)
            .parse()
            .map(Some)
            .map_err(|_| OpError::store(format!("{LOADS_TABLE}/{id}/{column} is not a number"))),
    }
}

/// Where the load of a file stands: new, interrupted (resume at the checkpoint) or done.
/// Writes nothing.
pub fn load_begin(store: &Store, r: &LoadBegin) -> OpResult<LoadPlan> {
    check_load_table(&r.table)?;
    check_load_id(&r.id, false)?;
    for spec in store.observers() {
        if spec.kind == NotifyKind::Weak && spec.table == r.table && r.columns.contains(&spec.column) {
            return Err(OpError::bad_input(format!(
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
        let number = |name: &str| -> OpResult<u64> {
            field(name)
                .unwrap_or_default()
                .parse()
                .map_err(|_| OpError::store(format!("{LOADS_TABLE}/{id}/{name} is missing or not a number")))
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
    if cp.lines >= cp.total {
        if r.again {
            return Ok(new(cp.generation + 1));
        }
        if !same {
            return Err(OpError::bad_input(format!(
                "{} was loaded into {} with other options ({}; now {}); pass --again to load it with these",
                r.file, r.table, cp.options, r.options
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
    Err(OpError::bad_input(format!(
        "{} was being loaded into {} with other options ({}) and stopped at record {} of {}; \
         run the load with those options to finish it, or pass --again to start over",
        r.file, r.table, cp.options, cp.lines, cp.total
    )))
}

/// Writes one batch of a load and its checkpoint in one transaction, unless the checkpoint is
/// already past it (then nothing is written: a repeated batch is harmless).
pub fn load_batch(store: &Store, b: &LoadBatch) -> OpResult<LoadProgress> {
    check_load_table(&b.table)?;
    check_load_id(&b.id, true)?;
    if b.records.is_empty() {
        return Err(OpError::bad_input("a load batch needs at least one record"));
    }
    let end = b.start.saturating_add(b.records.len() as u64);
    if end > b.total {
        return Err(OpError::bad_input(format!(
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
        check_row(&record.row).map_err(|e| OpError::bad_input(format!("{}: {e}", at())))?;
        let mut cells = Vec::with_capacity(record.cells.len());
        for (column, value) in &record.cells {
            check_column(column).map_err(|e| OpError::bad_input(format!("{}: {e}", at())))?;
            let bytes = value
                .as_ref()
                .map(|v| v.to_bytes())
                .transpose()
                .map_err(|e| OpError::bad_input(format!("{}, column {column}: {e}", at())))?;
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
        let mut e = OpError::from(e);
        e.message = format!("loading records {}..{} of {}: {}", b.start + 1, end, b.file, e.message);
        e
    })?;
    if let Some(done) = behind {
        return Err(OpError::bad_input(format!(
            "load {} of {} has {} in, but this batch starts at record {}: run the load again to resume it",
            b.id,
            b.file,
            plural(done, "record", "records"),
            b.start
        )));
    }
    Ok(LoadProgress { done, total: b.total, skipped: written == 0, written })
}

/// Pending notifications, counted up to [`BACKLOG_CAP`].
pub struct Backlog {
    /// Per notified `(table, column)`.
    pub per_column: HashMap<(String, String), u64>,
    /// In all.
    pub total: u64,
    /// True if counting stopped at the cap (there may be more).
    pub capped: bool,
}

impl Backlog {
    /// Pending notifications of one column.
    pub fn of(&self, table: &str, column: &str) -> u64 {
        self.per_column.get(&(table.to_owned(), column.to_owned())).copied().unwrap_or(0)
    }
}

/// Counts the pending notifications.
pub fn backlog(store: &Store) -> OpResult<Backlog> {
    let pending = store.pending_notifications(BACKLOG_CAP)?;
    let mut per_column: HashMap<(String, String), u64> = HashMap::new();
    for e in &pending {
        *per_column.entry((e.cell.table.clone(), e.cell.column.clone())).or_default() += 1;
    }
    Ok(Backlog { per_column, total: pending.len() as u64, capped: pending.len() >= BACKLOG_CAP })
}

/// The store's status, and the host's when one runs here.
pub fn status(store: &Store, store_path: &Path, host: Option<&HostContext>) -> OpResult<StatusReport> {
    let backlog = backlog(store)?;
    let dead_letters = store.dead_letters()?.len() as u64;
    let host = host.map(|h| {
        let s = h.pipeline.status();
        let bindings = s
            .bindings
            .iter()
            .map(|b| BindingReport {
                name: b.name.clone(),
                table: b.table.clone(),
                column: b.column.clone(),
                kind: b.kind.to_string(),
                wasm: b.wasm.display().to_string(),
                source_hash: b.source_hash.clone(),
                loaded_at: rfc3339(b.loaded_at),
                runs: b.counts.runs,
                failures: b.counts.failures,
                mean_run_ms: (b.counts.runs > 0)
                    .then(|| b.counts.run_time.as_secs_f64() * 1000.0 / b.counts.runs as f64),
                backlog: backlog.of(&b.table, &b.column),
                backlog_capped: backlog.capped,
            })
            .collect();
        HostReport {
            url: h.url.clone(),
            pid: std::process::id(),
            started_at: rfc3339(h.started_at),
            generation: s.generation,
            loaded_at: s.loaded_at.map(rfc3339),
            last_error: s.last_error,
            bindings,
            throughput: h.sampler.throughput(),
            metrics: metrics_report(&store.metrics()),
        }
    });
    Ok(StatusReport {
        host,
        store: StoreReport {
            path: store_path.display().to_string(),
            pending_notifications: backlog.total,
            pending_capped: backlog.capped,
            dead_letters,
        },
        config_error: None,
    })
}

fn metrics_report(m: &percolator_store::Metrics) -> MetricsReport {
    MetricsReport {
        commits: m.commits,
        one_pc_commits: m.one_pc_commits,
        conflicts: m.conflicts,
        rolled_forward: m.rolled_forward,
        rolled_back: m.rolled_back,
        lock_waits: m.lock_waits,
        observer_runs: m.observer_runs,
        observer_skips: m.observer_skips,
        observer_failures: m.observer_failures,
        dead_letters: m.dead_letters,
        notifications_cleared: m.notifications_cleared,
        teleports: m.teleports,
    }
}

/// Lists the dead letters.
pub fn dead_letters(store: &Store) -> OpResult<Vec<DeadLetterReport>> {
    Ok(store
        .dead_letters()?
        .into_iter()
        .map(|d| {
            let row = String::from_utf8_lossy(&d.cell.row).into_owned();
            DeadLetterReport {
                cell: format!("{}/{row}/{}", d.cell.table, d.cell.column),
                table: d.cell.table,
                row,
                column: d.cell.column,
                observer: d.observer,
                attempts: d.attempts,
                error: d.error,
                time: rfc3339(UNIX_EPOCH + Duration::from_millis(d.wall_ms)),
                id: d.id,
            }
        })
        .collect())
}

/// Moves one dead letter (or all) back to pending.
pub fn retry_dead_letters(store: &Store, r: &RetryRequest) -> OpResult<RetryResponse> {
    let ids = match (&r.id, r.all) {
        (Some(id), false) => vec![id.clone()],
        (None, true) => store.dead_letters()?.into_iter().map(|d| d.id).collect(),
        _ => return Err(OpError::bad_input("give either a dead letter id or all = true")),
    };
    let mut retried = Vec::new();
    for id in ids {
        store.retry_dead_letter(&id).map_err(|e| match e {
            percolator_store::Error::NotFound(_) => {
                OpError::not_found(format!("no dead letter {id:?} (list them with `percolator dead-letters`)"))
            }
            e => OpError::from(e),
        })?;
        retried.push(id);
    }
    Ok(RetryResponse { retried })
}

/// Searches the web index (`docs/webindex.md`): pages having every term of the words, ranked
/// by the summed counts, then URL.
pub fn query(store: &Store, r: &QueryRequest) -> OpResult<QueryResponse> {
    use webindex::schema;
    if r.limit == 0 {
        return Err(OpError::bad_input("limit must be at least 1"));
    }
    let mut terms = webindex::text::terms(&r.words.join(" "));
    terms.sort();
    terms.dedup();
    if terms.is_empty() {
        return Err(OpError::bad_input(format!(
            "no searchable terms in {:?} (terms are runs of 2-32 letters or digits that are not stop words)",
            r.words.join(" ")
        )));
    }
    let txn = store.begin()?;
    let mut scores: Option<BTreeMap<String, u64>> = None;
    for term in &terms {
        let (lo, hi) = schema::prefix_range(term);
        let mut found: BTreeMap<String, u64> = BTreeMap::new();
        let mut from = lo.clone();
        loop {
            const PAGE: usize = 4096;
            let page = txn.scan(schema::INDEX, &from, Some(&hi), Some(&[schema::HIT_COUNT]), PAGE)?;
            for e in &page {
                let url = String::from_utf8_lossy(&e.row[lo.len()..]).into_owned();
                let count: u64 = String::from_utf8_lossy(&e.value).trim().parse().map_err(|_| {
                    OpError::store(format!(
                        "{}/{}/{}: {:?} is not a count",
                        schema::INDEX,
                        String::from_utf8_lossy(&e.row),
                        schema::HIT_COUNT,
                        String::from_utf8_lossy(&e.value)
                    ))
                })?;
                found.insert(url, count);
            }
            match page.last() {
                Some(last) if page.len() == PAGE => {
                    from = last.row.clone();
                    from.push(0);
                }
                _ => break,
            }
        }
        scores = Some(match scores {
            None => found,
            Some(prev) => prev.into_iter().filter_map(|(u, s)| found.get(&u).map(|c| (u, s + c))).collect(),
        });
    }
    let mut ranked: Vec<(String, u64)> = scores.unwrap_or_default().into_iter().collect();
    ranked.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let matched = ranked.len() as u64;
    ranked.truncate(r.limit);
    let cells: Vec<_> = ranked
        .iter()
        .map(|(url, _)| percolator_store::CellRef::new(schema::PAGES, url.as_bytes(), schema::DOC_TITLE))
        .collect();
    let titles = txn.get_many(&cells)?;
    let hits = ranked
        .into_iter()
        .zip(titles)
        .enumerate()
        .map(|(i, ((url, score), title))| QueryHit {
            rank: i + 1,
            url,
            score,
            title: title.map(|t| String::from_utf8_lossy(&t).into_owned()),
        })
        .collect();
    Ok(QueryResponse { terms, hits, matched })
}

/// Garbage-collects versions no reader can see.
pub fn gc(store: &Store) -> OpResult<GcReport> {
    let s = store.gc()?;
    Ok(GcReport {
        safepoint: s.safepoint.raw(),
        rows: s.rows,
        locks_resolved: s.locks_resolved,
        versions_removed: s.versions_removed,
        deferred: s.deferred,
    })
}

/// The timeout of a [`WaitRequest`], checked: a number of seconds from 0 to
/// [`MAX_WAIT_SECS`].
pub fn wait_timeout(r: &WaitRequest) -> OpResult<Duration> {
    let t = r.timeout_secs;
    if !t.is_finite() || t < 0.0 {
        return Err(OpError::bad_input(format!("timeout {t} is not a number of seconds")));
    }
    if t > MAX_WAIT_SECS as f64 {
        return Err(OpError::bad_input(format!("timeout {t} s is more than the limit of {MAX_WAIT_SECS} s")));
    }
    Duration::try_from_secs_f64(t).map_err(|_| OpError::bad_input(format!("timeout {t} is not a number of seconds")))
}

/// True if the pipeline is at its fixed point now: no notification pending, no run going.
/// Does not wait (a running host polls it; see `http.rs`).
pub fn quiescent(store: &Store) -> OpResult<bool> {
    Ok(store.wait_quiescent(Duration::ZERO)?)
}

/// `wait` without a host: no scanner runs here, so nothing would ever process a pending
/// notification; it answers at once (an error if any is pending). A running host waits
/// instead, polling [`quiescent`] until the timeout or its shutdown.
pub fn wait(store: &Store, r: &WaitRequest) -> OpResult<WaitResponse> {
    wait_timeout(r)?;
    let b = backlog(store)?;
    if b.total > 0 {
        let pending = match (b.capped, b.total) {
            (true, n) => format!("at least {n} notifications are"),
            (false, 1) => "1 notification is".to_owned(),
            (false, n) => format!("{n} notifications are"),
        };
        return Err(OpError::bad_input(format!(
            "{pending} pending and no host is running to process them (start one with `percolator up <config>`)"
        )));
    }
    Ok(WaitResponse { quiescent: true })
}

/// `1 record`, `2 records`.
pub fn plural(n: impl fmt::Display, one: &str, many: &str) -> String {
    let s = n.to_string();
    if s == "1" { format!("1 {one}") } else { format!("{s} {many}") }
}

/// Lowercase hex.
pub fn hex(b: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        let _ = write!(s, "{x:02x}");
    }
    s
}

/// Decodes [`hex`].
pub fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect()
}

/// `2024-05-01T12:34:56.789Z`.
pub fn rfc3339(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        d.subsec_millis()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_is_the_first_key_after_the_prefix() {
        assert_eq!(prefix_end(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_end(b"a\xff"), Some(b"b".to_vec()));
        assert_eq!(prefix_end(b"\xff\xff"), None);
        assert_eq!(prefix_end(b""), None);
    }

    #[test]
    fn rfc3339_formats_utc() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(UNIX_EPOCH + Duration::from_millis(951_782_400_123)), "2000-02-29T00:00:00.123Z");
        assert_eq!(rfc3339(UNIX_EPOCH + Duration::from_secs(1_700_000_000)), "2023-11-14T22:13:20.000Z");
    }

    fn batch(start: u64, rows: &[&str]) -> LoadBatch {
        LoadBatch {
            table: "t".into(),
            id: "0123456789abcdef0123456789abcdef".into(),
            file: "f.jsonl".into(),
            options: "format=jsonl key=row family=raw".into(),
            start,
            total: 4,
            records: rows
                .iter()
                .map(|r| LoadRecord { row: (*r).into(), cells: vec![("raw:x".into(), Some((*r).into()))] })
                .collect(),
        }
    }

    #[test]
    fn a_batch_counts_only_the_records_it_writes() {
        let store = mem_store();
        let p = load_batch(&store, &batch(0, &["a", "b"])).unwrap();
        assert_eq!((p.done, p.written, p.skipped), (2, 2, false));
        // Another run's batch overlapping this one: only the new records are written.
        let p = load_batch(&store, &batch(0, &["a", "b", "c"])).unwrap();
        assert_eq!((p.done, p.written, p.skipped), (3, 1, false));
        let p = load_batch(&store, &batch(1, &["b", "c"])).unwrap();
        assert_eq!((p.done, p.written, p.skipped), (3, 0, true));
        let e = load_batch(&store, &LoadBatch { table: LOADS_TABLE.into(), ..batch(3, &["d"]) }).unwrap_err();
        assert!(e.message.contains("holds the checkpoints of loads"), "{e}");
    }

    fn mem_store() -> Store {
        Store::with_backend(Arc::new(percolator_store::MemBigtable::new()), Default::default()).unwrap()
    }

    #[test]
    fn names_and_keys_are_checked() {
        let store = mem_store();
        let get = |table: &str, row: &str, column: &str| {
            get(&store, &GetRequest { table: table.into(), row: row.into(), column: column.into() }).unwrap_err()
        };
        let e = get("pages", "", "doc:title");
        assert_eq!((e.kind, e.message.as_str()), (ErrorKind::BadInput, "the row key is empty"));
        assert_eq!(get("", "x", "doc:title").message, "table name is empty");
        assert_eq!(
            get("pa\tges", "x", "doc:title").message,
            "table name \"pa\\tges\" contains the control character '\\t'"
        );
        assert_eq!(get("pages", "x", "__ack:x").message, "column \"__ack:x\" is in the reserved namespace \"__\"");
        assert!(get("pages", &"r".repeat(4097), "doc:title").message.contains("longer than the limit of 4096"));
        // A valid name of a table without cells (a typo?) is said to be empty.
        let e = get("pa ges", "x", "doc:title");
        assert_eq!(e.kind, ErrorKind::NotFound);
        assert_eq!(e.message, "pa ges/x/doc:title: no value (table \"pa ges\" has no cells at all)");
        load_batch(&store, &batch(0, &["a"])).unwrap();
        assert_eq!(get("t", "b", "raw:x").message, "t/b/raw:x: no value");

        let scan = |table: &str, start: Option<&str>, end: Option<&str>| {
            scan(
                &store,
                &ScanRequest {
                    table: table.into(),
                    start: start.map(Into::into),
                    end: end.map(Into::into),
                    limit: 10,
                    ..Default::default()
                },
            )
        };
        let e = scan("t", Some("z"), Some("a")).unwrap_err();
        assert_eq!(e.kind, ErrorKind::BadInput);
        assert_eq!(e.message, "the range is empty: start \"z\" is not before end \"a\" (the end is exclusive)");
        assert!(scan("t", Some("a"), Some("a")).is_err());
        assert_eq!(scan("t", Some("a"), Some("b")).unwrap().cells.len(), 1);
        assert_eq!(scan("", None, None).unwrap_err().message, "table name is empty");

        // Load batches sent over HTTP are checked the same way (the CLI checks its file first).
        let e = load_batch(&store, &batch(0, &[""])).unwrap_err();
        assert_eq!(e.message, "record 1 of f.jsonl (row \"\"): the row key is empty");
        let mut b = batch(0, &["a"]);
        b.records[0].cells[0].0 = "nofamily\u{1}".into();
        let e = load_batch(&store, &b).unwrap_err();
        assert!(e.message.starts_with("record 1 of f.jsonl (row \"a\"): column name "), "{e}");
    }

    #[test]
    fn wait_without_a_host_counts_in_words() {
        let store = mem_store();
        let observer: Arc<dyn percolator_store::Observer> = Arc::new(Never);
        let spec = percolator_store::ObserverSpec {
            name: "o".into(),
            table: "t".into(),
            column: "raw:x".into(),
            kind: NotifyKind::Strong,
            max_attempts: 1,
        };
        store.set_observers(vec![(spec, observer)]).unwrap();
        let w = || wait(&store, &WaitRequest { timeout_secs: 0.0 }).unwrap_err().message;
        load_batch(&store, &batch(0, &["a"])).unwrap();
        assert!(w().starts_with("1 notification is pending and no host is running"), "{}", w());
        load_batch(&store, &batch(1, &["b"])).unwrap();
        assert!(w().starts_with("2 notifications are pending and no host is running"), "{}", w());
    }

    struct Never;

    impl percolator_store::Observer for Never {
        fn observe(
            &self,
            _: &mut Transaction,
            _: &percolator_store::Notification,
        ) -> Result<(), percolator_store::ObserveError> {
            unreachable!("no scanner runs")
        }
    }

    #[test]
    fn wait_timeouts_are_bounded() {
        let t = |secs: f64| wait_timeout(&WaitRequest { timeout_secs: secs });
        assert_eq!(t(0.5), Ok(Duration::from_millis(500)));
        assert_eq!(t(3600.0), Ok(Duration::from_secs(3600)));
        assert_eq!(t(3600.5).unwrap_err().message, "timeout 3600.5 s is more than the limit of 3600 s");
        assert_eq!(t(1e19).unwrap_err().kind, ErrorKind::BadInput);
        assert_eq!(t(-1.0).unwrap_err().message, "timeout -1 is not a number of seconds");
        assert_eq!(t(f64::NAN).unwrap_err().kind, ErrorKind::BadInput);
    }

    #[test]
    fn hex_round_trips() {
        assert_eq!(hex(b"\x00\xffa"), "00ff61");
        assert_eq!(unhex("00ff61"), Some(b"\x00\xffa".to_vec()));
        assert_eq!(unhex("0"), None);
        assert_eq!(unhex("zz"), None);
    }
}
