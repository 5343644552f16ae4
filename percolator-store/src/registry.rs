//! The observed-column registry: the pipeline's bindings, kept in the store so that every
//! writer (any host, a loader, the CLI) sets the notify cells of every observed column.
//!
//! The bindings are one cell, [`TABLE`]/[`ROW`]/[`COLUMN`], written by Percolator transactions;
//! the version of a registry is the commit timestamp that wrote it. A store loads it at open
//! and, on a shared backend, polls it (`StoreConfig::registry_poll`). Observer implementations
//! stay per process: [`Registry`] pairs the store's bindings with the ones this process can run.
//! How a change takes effect everywhere (acknowledgements in the worker leases) is argued in
//! `docs/design.md`, "Several hosts".

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crate::combine::{CombineSpec, Folder};
use crate::error::{Error, Result};
use crate::notify::{NotifyKind, Observer, ObserverSpec};
use crate::store::{Inner, Store};
use crate::timestamp::Timestamp;
use crate::transaction::Transaction;
use crate::worker;

/// Table of the registry cell (any table would do: the column is reserved, so no user cell
/// can collide with it, and scans do not show it).
pub(crate) const TABLE: &str = "__system";
/// Row of the registry cell.
pub(crate) const ROW: &[u8] = b"registry";
/// Column of the registry cell.
pub(crate) const COLUMN: &str = "__bindings";
/// Column of the registry's second cell: the columns every commit writes to the change log
/// (`changes.rs`). The registry's version is the newer commit timestamp of the two cells.
pub(crate) const LOG_COLUMN: &str = "__changes";
/// Column of the registry's third cell: the combined columns (`combine.rs`).
pub(crate) const COMBINE_COLUMN: &str = "__combine";

/// The registry as saved: its version, the bindings and the logged columns.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Saved {
    /// The newest commit timestamp of the registry's cells (zero: nothing saved yet).
    pub(crate) version: Timestamp,
    pub(crate) specs: BTreeMap<String, ObserverSpec>,
    /// `(table, column)`s written to the change log.
    pub(crate) logged: BTreeSet<(String, String)>,
    /// The combined columns.
    pub(crate) combined: BTreeSet<CombineSpec>,
}

/// One binding: the store's spec and, if this process runs it, its implementation.
pub(crate) struct Bound {
    pub(crate) spec: ObserverSpec,
    pub(crate) observer: Option<Arc<dyn Observer>>,
}

/// The store's bindings (what commits notify, what a clear must satisfy) with this process's
/// implementations. Copy-on-write behind the store's lock: a swap is atomic, and commits and
/// runs already holding the old one finish on it.
#[derive(Default, Clone)]
pub(crate) struct Registry {
    /// Commit timestamp of the saved registry this is built from (zero: none saved yet).
    pub(crate) version: Timestamp,
    specs: BTreeMap<String, ObserverSpec>,
    local: BTreeMap<String, Arc<dyn Observer>>,
    /// Bindings by table, then column (nested, so that [`Registry::kind_of`], on every
    /// `set`, looks up with the `&str`s it has instead of building a key).
    by_table: Names<Names<Vec<Arc<Bound>>>>,
    /// The logged columns, as saved.
    logged: BTreeSet<(String, String)>,
    /// The same by table, for the commit path's lookups.
    logged_by_table: Names<HashSet<String, foldhash::fast::RandomState>>,
    /// The combined columns, as saved.
    combined: BTreeSet<CombineSpec>,
    /// The same by table and column, for the read path's lookups.
    combined_by_table: Names<Names<Arc<CombineSpec>>>,
}

/// A map by table or column name, looked up for every cell a commit writes: hashed with
/// foldhash (seeded per process) rather than SipHash. Its keys are the bindings' names, which
/// the operator writes, not what a request sends.
type Names<V> = HashMap<String, V, foldhash::fast::RandomState>;

impl Registry {
    pub(crate) fn new(saved: Saved, local: BTreeMap<String, Arc<dyn Observer>>) -> Registry {
        let Saved { version, specs, logged, combined } = saved;
        let mut logged_by_table: Names<HashSet<String, foldhash::fast::RandomState>> = Names::default();
        for (table, column) in &logged {
            logged_by_table.entry(table.clone()).or_default().insert(column.clone());
        }
        let mut by_table: Names<Names<Vec<Arc<Bound>>>> = Names::default();
        for spec in specs.values() {
            let observer = local.get(&spec.name).cloned();
            by_table
                .entry(spec.table.clone())
                .or_default()
                .entry(spec.column.clone())
                .or_default()
                .push(Arc::new(Bound { spec: spec.clone(), observer }));
        }
        let mut combined_by_table: Names<Names<Arc<CombineSpec>>> = Names::default();
        for spec in &combined {
            combined_by_table
                .entry(spec.table.clone())
                .or_default()
                .insert(spec.column.clone(), Arc::new(spec.clone()));
            // The folder: bound by the registry itself, on every host.
            let binding = Folder::binding(spec);
            let folder: Arc<dyn Observer> = Arc::new(Folder { spec: spec.clone() });
            by_table
                .entry(binding.table.clone())
                .or_default()
                .entry(binding.column.clone())
                .or_default()
                .push(Arc::new(Bound { spec: binding, observer: Some(folder) }));
        }
        Registry { version, specs, local, by_table, logged, logged_by_table, combined, combined_by_table }
    }

    /// The spec of `table/column` if it is combined.
    pub(crate) fn combined(&self, table: &str, column: &str) -> Option<Arc<CombineSpec>> {
        if self.combined_by_table.is_empty() {
            return None;
        }
        self.combined_by_table.get(table).and_then(|c| c.get(column)).cloned()
    }

    /// The combined columns of `table`.
    pub(crate) fn combined_of_table(&self, table: &str) -> Vec<Arc<CombineSpec>> {
        if self.combined_by_table.is_empty() {
            return Vec::new();
        }
        self.combined_by_table.get(table).map(|c| c.values().cloned().collect()).unwrap_or_default()
    }

    /// The combined columns, as saved.
    pub(crate) fn combined_specs(&self) -> &BTreeSet<CombineSpec> {
        &self.combined
    }

    /// Whether a commit's write to `table/column` goes to the change log.
    pub(crate) fn logs(&self, table: &str, column: &str) -> bool {
        !self.logged_by_table.is_empty() && self.logged_by_table.get(table).is_some_and(|c| c.contains(column))
    }

    /// Whether any column is logged.
    pub(crate) fn logs_anything(&self) -> bool {
        !self.logged_by_table.is_empty()
    }

    /// The logged columns.
    pub(crate) fn logged(&self) -> &BTreeSet<(String, String)> {
        &self.logged
    }

    /// The registry as saved (without this process's implementations).
    fn saved(&self) -> Saved {
        Saved {
            version: self.version,
            specs: self.specs.clone(),
            logged: self.logged.clone(),
            combined: self.combined.clone(),
        }
    }

    /// How `table/column` is observed, if it is (by any binding of the store).
    pub(crate) fn kind_of(&self, table: &str, column: &str) -> Option<NotifyKind> {
        if self.by_table.is_empty() {
            return None;
        }
        self.bound(table, column).and_then(|v| v.first()).map(|b| b.spec.kind)
    }

    /// The store's bindings of `table/column`, each with this process's implementation if any.
    pub(crate) fn observers(&self, table: &str, column: &str) -> Vec<Arc<Bound>> {
        self.bound(table, column).map(<[_]>::to_vec).unwrap_or_default()
    }

    fn bound(&self, table: &str, column: &str) -> Option<&[Arc<Bound>]> {
        self.by_table.get(table)?.get(column).map(Vec::as_slice)
    }

    pub(crate) fn specs(&self) -> &BTreeMap<String, ObserverSpec> {
        &self.specs
    }

    pub(crate) fn local(&self) -> &BTreeMap<String, Arc<dyn Observer>> {
        &self.local
    }
}

/// Checks that no column is bound both strong and weak.
pub(crate) fn check_kinds(specs: &BTreeMap<String, ObserverSpec>) -> Result<()> {
    let mut kinds: HashMap<(&str, &str), (&str, NotifyKind)> = HashMap::new();
    for spec in specs.values() {
        if let Some((other, kind)) = kinds.insert((&spec.table, &spec.column), (&spec.name, spec.kind))
            && kind != spec.kind
        {
            return Err(Error::InvalidArgument(format!(
                "observer {}: column {}/{} is already bound as {kind} (by {other}), cannot also be {}",
                spec.name, spec.table, spec.column, spec.kind
            )));
        }
    }
    Ok(())
}

const FORMAT: u8 = 1;

/// Encodes the bindings: version byte 1, then per binding five length-prefixed (u32 LE) fields
/// name, table, column, kind (`strong`/`weak`) and max attempts (decimal).
fn encode(specs: &BTreeMap<String, ObserverSpec>) -> Vec<u8> {
    let mut out = vec![FORMAT];
    for s in specs.values() {
        let attempts = s.max_attempts.to_string();
        let kind = s.kind.to_string();
        for part in [&s.name, &s.table, &s.column, &kind, &attempts] {
            out.extend_from_slice(&(part.len() as u32).to_le_bytes());
            out.extend_from_slice(part.as_bytes());
        }
    }
    out
}

fn decode(bytes: &[u8]) -> Result<BTreeMap<String, ObserverSpec>> {
    let bad = |why: &str| Error::Corrupt(format!("the observer registry ({TABLE}/registry/{COLUMN}) {why}"));
    let mut rest = bytes.strip_prefix(&[FORMAT]).ok_or_else(|| bad("has an unknown format version"))?;
    let mut out = BTreeMap::new();
    while !rest.is_empty() {
        let mut parts: Vec<String> = Vec::with_capacity(5);
        for _ in 0..5 {
            let n = rest.get(..4).ok_or_else(|| bad("is truncated"))?;
            let n = u32::from_le_bytes(n.try_into().expect("4 bytes")) as usize;
            let part = rest.get(4..4 + n).ok_or_else(|| bad("is truncated"))?;
            parts.push(String::from_utf8(part.to_vec()).map_err(|_| bad("holds a name that is not UTF-8"))?);
            rest = &rest[4 + n..];
        }
        let kind = match parts[3].as_str() {
            "strong" => NotifyKind::Strong,
            "weak" => NotifyKind::Weak,
            _ => return Err(bad("holds an unknown notification kind")),
        };
        let max_attempts = parts[4].parse().map_err(|_| bad("holds a bad max_attempts"))?;
        let [name, table, column, _, _]: [String; 5] = parts.try_into().expect("five parts");
        out.insert(name.clone(), ObserverSpec { name, table, column, kind, max_attempts });
    }
    Ok(out)
}

const LOG_FORMAT: u8 = 1;

/// Encodes the logged columns: version byte 1, then per column its table and name, each
/// length-prefixed (u32 LE).
fn encode_logged(logged: &BTreeSet<(String, String)>) -> Vec<u8> {
    let mut out = vec![LOG_FORMAT];
    for (table, column) in logged {
        for part in [table, column] {
            out.extend_from_slice(&(part.len() as u32).to_le_bytes());
            out.extend_from_slice(part.as_bytes());
        }
    }
    out
}

fn decode_logged(bytes: &[u8]) -> Result<BTreeSet<(String, String)>> {
    let bad = |why: &str| Error::Corrupt(format!("the change log's columns ({TABLE}/registry/{LOG_COLUMN}) {why}"));
    let mut rest = bytes.strip_prefix(&[LOG_FORMAT]).ok_or_else(|| bad("have an unknown format version"))?;
    let mut out = BTreeSet::new();
    while !rest.is_empty() {
        let mut parts = [String::new(), String::new()];
        for part in &mut parts {
            let n = rest.get(..4).ok_or_else(|| bad("are truncated"))?;
            let n = u32::from_le_bytes(n.try_into().expect("4 bytes")) as usize;
            let bytes = rest.get(4..4 + n).ok_or_else(|| bad("are truncated"))?;
            *part = String::from_utf8(bytes.to_vec()).map_err(|_| bad("hold a name that is not UTF-8"))?;
            rest = &rest[4 + n..];
        }
        let [table, column] = parts;
        out.insert((table, column));
    }
    Ok(out)
}

/// Reads the saved registry in `txn`: its version (the newest commit timestamp of its cells,
/// zero if none was saved), the bindings and the logged columns.
fn read(txn: &Transaction) -> Result<Saved> {
    let mut cells = txn.read_row(TABLE, ROW, &[COLUMN, LOG_COLUMN, COMBINE_COLUMN])?.into_iter();
    let (Some(bindings), Some(log), Some(combine)) = (cells.next(), cells.next(), cells.next()) else {
        return Err(Error::Corrupt("the registry row read back short".into()));
    };
    let mut saved = Saved::default();
    for cell in [&bindings, &log, &combine] {
        if let Some((ts, _)) = &cell.write {
            saved.version = saved.version.max(*ts);
        }
    }
    if let Some(v) = txn.inner.values.read(bindings)? {
        saved.specs = decode(&v)?;
    }
    if let Some(v) = txn.inner.values.read(log)? {
        saved.logged = decode_logged(&v)?;
    }
    if let Some(v) = txn.inner.values.read(combine)? {
        saved.combined = crate::combine::decode_specs(&v)?;
    }
    Ok(saved)
}

/// Reads the saved registry at a fresh snapshot.
pub(crate) fn load(inner: &Arc<Inner>) -> Result<Saved> {
    read(&Transaction::begin(inner.clone())?)
}

/// Changes the saved bindings in a transaction (retried on conflict): `change` gets the current
/// ones and edits them. Returns the new version and bindings. A change that changes nothing
/// writes nothing (a host restarting, or the CLI opening the store, with the same bindings) and
/// returns the current version.
pub(crate) fn save(
    store: &Store,
    mut change: impl FnMut(&mut BTreeMap<String, ObserverSpec>) -> Result<()>,
) -> Result<Saved> {
    let ((mut saved, unchanged), commit_ts) = store.run_for_commit_ts(|txn| {
        let mut saved = read(txn)?;
        let before = saved.specs.clone();
        change(&mut saved.specs)?;
        check_kinds(&saved.specs)?;
        check_combined(&saved.specs, &saved.combined)?;
        if saved.specs == before {
            return Ok((saved, true));
        }
        txn.set_reserved(crate::bigtable::CellRef::new(TABLE, ROW, COLUMN), Some(encode(&saved.specs)));
        Ok((saved, false))
    })?;
    if !unchanged {
        saved.version = commit_ts;
    }
    Ok(saved)
}

/// Replaces the saved logged columns (retried on conflict), like [`save`] for the bindings.
pub(crate) fn save_logged(store: &Store, logged: &BTreeSet<(String, String)>) -> Result<Saved> {
    let ((mut saved, unchanged), commit_ts) = store.run_for_commit_ts(|txn| {
        let mut saved = read(txn)?;
        if saved.logged == *logged {
            return Ok((saved, true));
        }
        saved.logged = logged.clone();
        txn.set_reserved(crate::bigtable::CellRef::new(TABLE, ROW, LOG_COLUMN), Some(encode_logged(logged)));
        Ok((saved, false))
    })?;
    if !unchanged {
        saved.version = commit_ts;
    }
    Ok(saved)
}

/// Replaces the saved combined columns (retried on conflict), like [`save`] for the bindings.
/// Refuses a combined column that a weak observer is bound to (its folded value is written).
pub(crate) fn save_combined(store: &Store, combined: &BTreeSet<CombineSpec>) -> Result<Saved> {
    let ((mut saved, unchanged), commit_ts) = store.run_for_commit_ts(|txn| {
        let mut saved = read(txn)?;
        check_combined(&saved.specs, combined)?;
        if saved.combined == *combined {
            return Ok((saved, true));
        }
        saved.combined = combined.clone();
        let cell = crate::bigtable::CellRef::new(TABLE, ROW, COMBINE_COLUMN);
        txn.set_reserved(cell, Some(crate::combine::encode_specs(combined)));
        Ok((saved, false))
    })?;
    if !unchanged {
        saved.version = commit_ts;
    }
    Ok(saved)
}

/// Checks that no combined column is bound to a weak observer.
pub(crate) fn check_combined(specs: &BTreeMap<String, ObserverSpec>, combined: &BTreeSet<CombineSpec>) -> Result<()> {
    for c in combined {
        if let Some(s) =
            specs.values().find(|s| s.table == c.table && s.column == c.column && s.kind == NotifyKind::Weak)
        {
            return Err(Error::InvalidArgument(format!(
                "combined column {c} is bound to the weak observer {}: a combined column's folded value is written, and \
                 a weak-notify column cannot be (bind it strong)",
                s.name
            )));
        }
    }
    Ok(())
}

/// Swaps in a registry built from `version`/`specs` (keeping this process's implementations
/// unless `local` is given), unless a newer version is already in. Returns the registry it
/// replaced if it swapped.
pub(crate) fn install(
    inner: &Inner,
    saved: Saved,
    local: Option<BTreeMap<String, Arc<dyn Observer>>>,
) -> Result<Option<Arc<Registry>>> {
    let mut reg = inner.registry.write().map_err(|_| Error::Closed)?;
    if saved.version < reg.version || (saved.version == reg.version && local.is_none()) {
        return Ok(None);
    }
    let local = local.unwrap_or_else(|| reg.local.clone());
    let new = Arc::new(Registry::new(saved, local));
    let old = std::mem::replace(&mut *reg, new);
    drop(reg);
    inner.signal.bump();
    Ok(Some(old))
}

/// Swaps in a new set of implementations over the current bindings.
pub(crate) fn install_local(inner: &Inner, local: BTreeMap<String, Arc<dyn Observer>>) -> Result<Arc<Registry>> {
    let mut reg = inner.registry.write().map_err(|_| Error::Closed)?;
    let new = Arc::new(Registry::new(reg.saved(), local));
    let old = std::mem::replace(&mut *reg, new);
    Ok(old)
}

/// Waits until every commit that took `old` has finished (they hold its `Arc`; `old` is the
/// last one left then), then records its successor's version as acknowledged and publishes it
/// in the worker lease. On an exclusive backend nobody waits for acknowledgements: nothing to do.
pub(crate) fn acknowledge(inner: &Inner, old: Arc<Registry>) {
    if inner.backend.exclusive() {
        return;
    }
    let started = Instant::now();
    let mut warned = false;
    while Arc::strong_count(&old) > 1 {
        if !warned && started.elapsed() > Duration::from_secs(10) {
            tracing::warn!("registry change: still waiting for commits that started before it");
            warned = true;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(old);
    let version = inner.registry.read().map(|r| r.version.raw()).unwrap_or(0);
    inner.acked_registry.fetch_max(version, Ordering::SeqCst);
    if let Err(e) = worker::publish(inner) {
        tracing::warn!(error = %e, "registry change: publishing its acknowledgement failed (the next heartbeat does)");
    }
}

/// Waits until every other live worker acknowledged `version`, up to one lease period and a
/// second (a worker that died meanwhile stops counting when its lease expires). Logs the
/// workers that did not.
pub(crate) fn await_acknowledged(inner: &Inner, version: Timestamp) -> Result<()> {
    if inner.backend.exclusive() {
        return Ok(());
    }
    let deadline = Instant::now() + inner.config.worker_lease + Duration::from_secs(1);
    loop {
        let behind = worker::behind_registry(inner, version)?;
        if behind.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            tracing::warn!(
                ?behind,
                version = version.raw(),
                "registry change: these workers hold live leases but did not acknowledge the new bindings; \
                 their commits may miss its notify cells until they do"
            );
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Polls the saved registry every `StoreConfig::registry_poll` on a shared backend and swaps
/// in newer versions. Holds only a weak reference, so it never keeps a store alive.
pub(crate) fn spawn_watcher(inner: Weak<Inner>, stop: Arc<worker::Stop>, every: Duration) {
    std::thread::Builder::new()
        .name("percolator-registry".into())
        .spawn(move || {
            let mut failing = false;
            while !stop.sleep(every) {
                let Some(inner) = inner.upgrade() else { return };
                match refresh(&inner) {
                    Ok(()) => {
                        if std::mem::take(&mut failing) {
                            tracing::info!("registry: reading the bindings works again");
                        }
                    }
                    Err(e) if !std::mem::replace(&mut failing, true) => {
                        tracing::warn!(error = %e, "registry: reading the bindings failed; retrying");
                    }
                    Err(e) => tracing::debug!(error = %e, "registry: reading the bindings failed again"),
                }
            }
        })
        .expect("spawning the registry watcher thread");
}

/// Loads the saved registry and swaps it in if it is newer (another host changed it).
pub(crate) fn refresh(inner: &Arc<Inner>) -> Result<()> {
    let saved = load(inner)?;
    let current = inner.registry.read().map_err(|_| Error::Closed)?.version;
    if saved.version <= current {
        return Ok(());
    }
    let names: Vec<&str> = saved.specs.keys().map(String::as_str).collect();
    tracing::info!(version = saved.version.raw(), bindings = ?names, logged = saved.logged.len(), "registry: the bindings changed");
    {
        let reg = inner.registry.read().map_err(|_| Error::Closed)?;
        let missing: Vec<&str> = names.iter().copied().filter(|n| !reg.local.contains_key(*n)).collect();
        if !reg.local.is_empty() && !missing.is_empty() {
            tracing::warn!(
                ?missing,
                "registry: bindings this process has no observer for; their notifications wait for a host that has"
            );
        }
    }
    if let Some(old) = install(inner, saved, None)? {
        acknowledge(inner, old);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, column: &str, kind: NotifyKind) -> ObserverSpec {
        ObserverSpec { name: name.into(), table: "t".into(), column: column.into(), kind, max_attempts: 3 }
    }

    #[test]
    fn bindings_round_trip_and_bad_bytes_are_corrupt() {
        let mut specs = BTreeMap::new();
        for s in [spec("a", "x", NotifyKind::Strong), spec("b", "y", NotifyKind::Weak)] {
            specs.insert(s.name.clone(), s);
        }
        let bytes = encode(&specs);
        assert_eq!(decode(&bytes).unwrap(), specs);
        assert_eq!(decode(&[FORMAT]).unwrap(), BTreeMap::new());
        for bad in [&bytes[..bytes.len() - 1], &[2u8][..], &[]] {
            assert!(matches!(decode(bad), Err(Error::Corrupt(_))), "{bad:?}");
        }
    }

    #[test]
    fn logged_columns_round_trip_and_bad_bytes_are_corrupt() {
        let logged: BTreeSet<(String, String)> =
            [("t".into(), "a:x".into()), ("u".into(), "b:y".into())].into_iter().collect();
        let bytes = encode_logged(&logged);
        assert_eq!(decode_logged(&bytes).unwrap(), logged);
        assert_eq!(decode_logged(&[LOG_FORMAT]).unwrap(), BTreeSet::new());
        for bad in [&bytes[..bytes.len() - 1], &[2u8][..], &[]] {
            assert!(matches!(decode_logged(bad), Err(Error::Corrupt(_))), "{bad:?}");
        }
    }

    #[test]
    fn a_column_cannot_be_strong_and_weak() {
        let mut specs = BTreeMap::new();
        specs.insert("a".into(), spec("a", "x", NotifyKind::Strong));
        specs.insert("b".into(), spec("b", "x", NotifyKind::Weak));
        let e = check_kinds(&specs).unwrap_err().to_string();
        assert!(e.contains("t/x") && e.contains("strong"), "{e}");
    }
}
