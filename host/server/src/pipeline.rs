//! A running pipeline: the configuration's bindings, compiled and registered with the store,
//! replaced as a whole on reload.
//!
//! Each binding's run counts (runs, failures, their time) are totals over the store's life and
//! over every host that shares it: [`Pipeline::persist_counts`] adds what it counted since its
//! last save to counters in the store's metadata under `observer/<binding name>`
//! ([`Store::add_totals`]), every 10 s and at a clean stop of `up`, and a binding's first load
//! continues from the totals; the run-time histogram (and so its percentiles) is saved and
//! continued with them. The runs that
//! committed and those lost to a conflict are counted by the store ([`Store::run_outcomes`],
//! this process's) and saved and continued beside them ([`Settled`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use percolator_runtime::{RUN_TIME_BUCKETS, RunCounts, RunStats, RunTotals, Runtime, WasmObserver};
use percolator_store::{NotifyKind, Observer, ObserverSpec, RunOutcomes, Store};

use crate::config::{Binding, Config};
use crate::sinks::Sinks;
use percolator_runtime::SinkTransform;

/// What is loaded for one binding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BindingStatus {
    /// Binding (and observer) name.
    pub name: String,
    /// Observed `table/column`.
    pub observes: String,
    /// Observed table.
    pub table: String,
    /// Observed column.
    pub column: String,
    /// Strong or weak.
    pub kind: NotifyKind,
    /// The declared writable columns (`table/column` or `table/family:*`).
    pub writes: Vec<String>,
    /// The component file.
    pub wasm: PathBuf,
    /// SHA-256 of the component it runs.
    pub source_hash: String,
    /// When this version of the binding was loaded (an unchanged binding keeps its time across
    /// reloads).
    pub loaded_at: SystemTime,
    /// Its runs so far: the counts and the run-time histogram over the store's life (all
    /// versions of the binding, saved across restarts); the failures of the last minute this
    /// host's.
    pub counts: RunCounts,
    /// How its runs ended (committed, lost to a conflict), over the store's life like
    /// `counts`.
    pub settled: Settled,
}

/// How a binding's runs ended, as the store counts them ([`Store::run_outcomes`]), as totals
/// over the store's life.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Settled {
    /// Runs that committed.
    pub committed: u64,
    /// Runs lost to a conflict (run again by the store; not failures).
    pub lost_to_conflict: u64,
}

impl Settled {
    fn of(o: Option<&RunOutcomes>) -> Settled {
        o.map(|o| Settled { committed: o.committed, lost_to_conflict: o.lost_to_conflict }).unwrap_or_default()
    }

    fn plus(self, o: Settled) -> Settled {
        Settled {
            committed: self.committed.saturating_add(o.committed),
            lost_to_conflict: self.lost_to_conflict.saturating_add(o.lost_to_conflict),
        }
    }

    fn minus(self, o: Settled) -> Settled {
        Settled {
            committed: self.committed.saturating_sub(o.committed),
            lost_to_conflict: self.lost_to_conflict.saturating_sub(o.lost_to_conflict),
        }
    }
}

/// The pipeline's state, for `status`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Status {
    /// Loaded bindings.
    pub bindings: Vec<BindingStatus>,
    /// Successful loads so far (1 after start-up).
    pub generation: u64,
    /// Why the last reload was rejected, if it was (the previous version kept serving).
    pub last_error: Option<String>,
    /// When the current generation was loaded.
    pub loaded_at: Option<SystemTime>,
    /// The components being compiled for a reload now (the current generation serves
    /// meanwhile).
    pub compiling: Vec<Compiling>,
}

/// A component being compiled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Compiling {
    /// The binding it is for.
    pub binding: String,
    /// The component file.
    pub wasm: PathBuf,
    /// How long it has been compiling.
    pub elapsed: Duration,
    /// Which of the configuration's components it is (1-based), and how many there are.
    pub index: usize,
    /// The configuration's components.
    pub total: usize,
}

#[derive(Clone)]
struct Loaded {
    binding: Binding,
    observer: Arc<WasmObserver>,
    loaded_at: SystemTime,
}

/// A binding's run counters and what of them is saved.
struct Counted {
    stats: Arc<RunStats>,
    /// The totals as of the last save (or the read at load): the counts since are what the
    /// next save adds.
    saved: RunTotals,
    /// The outcome totals as of the last save (or the read at load).
    settled_saved: Settled,
    /// The store's own count of them (this process's) at that save: the store's count now,
    /// less this, is what the next save adds.
    settled_seen: Settled,
}

/// Bindings of one configuration, running on a store.
pub struct Pipeline {
    store: Store,
    runtime: Runtime,
    state: Mutex<(BTreeMap<String, Loaded>, Status)>,
    /// The run counters of every binding loaded so far, by name: the versions of a binding
    /// count into the same ones, and so does a binding removed and added back. Kept after a
    /// binding is removed so that its last counts are saved. Locked after `state` when both
    /// are; a save holds it, so saves never overtake one another.
    counts: Mutex<BTreeMap<String, Counted>>,
    /// Held by [`Pipeline::apply`] from start to end: one reload at a time. The state lock is
    /// not held while components compile, so `status` answers meanwhile.
    applying: Mutex<()>,
    /// The component being compiled now, if any (for `status`): binding, file, since when,
    /// its index (1-based) among how many.
    compiling: Mutex<Option<CompilingNow>>,
    /// The host's sinks, when it runs them (`up` attaches them): [`Pipeline::apply`] applies
    /// the configuration's `[[sink]]`s with its bindings.
    sinks: OnceLock<Arc<Sinks>>,
    /// How long the change log keeps changes for readers without a subscription, from the
    /// configuration last applied (the trimmer reads it).
    changes_keep: Mutex<Duration>,
    /// The reload's inputs (the configuration file, the observers folder) and what they were
    /// when a reload last read them ([`Pipeline::note_inputs`]): while they differ, a reload is
    /// coming ([`Pipeline::reload_pending`]).
    inputs: Mutex<Option<(PathBuf, PathBuf, Inputs)>>,
    /// Reloads under way, from before they note their inputs to after they applied (or
    /// rejected) them ([`Pipeline::begin_reload`]): `applying` alone leaves a gap between the
    /// two, where a reload has read the inputs but not yet applied them.
    reloads: AtomicUsize,
}

/// A reload under way ([`Pipeline::begin_reload`]), until dropped.
pub struct ReloadUnderWay<'a>(&'a AtomicUsize);

impl Drop for ReloadUnderWay<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The component being compiled: binding, file, since when, its index (1-based) among how
/// many.
type CompilingNow = (String, PathBuf, Instant, usize, usize);

/// What a reload reads, as (file, modification time, length): the configuration file and
/// each `.wasm` of the observers folder.
type Inputs = Vec<(PathBuf, Option<std::time::SystemTime>, u64)>;

fn inputs(config_file: &Path, observers_dir: &Path) -> Inputs {
    let stat = |p: PathBuf| {
        let m = std::fs::metadata(&p).ok();
        let (modified, len) = m.map_or((None, 0), |m| (m.modified().ok(), m.len()));
        (p, modified, len)
    };
    let mut out = vec![stat(config_file.to_owned())];
    if let Ok(dir) = std::fs::read_dir(observers_dir) {
        let mut wasm: Vec<PathBuf> =
            dir.flatten().map(|e| e.path()).filter(|p| p.extension().is_some_and(|e| e == "wasm")).collect();
        wasm.sort();
        out.extend(wasm.into_iter().map(stat));
    }
    out
}

/// Milliseconds every component's compile is made to take longer (tests of a slow start-up).
pub const COMPILE_DELAY_ENV: &str = "PERCOLATOR_TEST_COMPILE_DELAY_MS";

/// The metadata key (of [`Store::add_totals`]) of a binding's run counts.
fn counts_key(binding: &str) -> String {
    format!("observer/{binding}")
}

/// The saved count of runs (a name in [`Store::add_totals`]).
const RUNS: &str = "runs";
/// The saved count of failed runs.
const FAILURES: &str = "failures";
/// The saved time of the runs, nanoseconds.
const RUN_NANOS: &str = "run_nanos";
/// The saved CPU time of the runs, nanoseconds (a store saved by a version before it has
/// none: its CPU time counts from then on).
const CPU_NANOS: &str = "cpu_nanos";
/// The saved time of the runs the run-time histogram holds (its sum), nanoseconds.
const HISTOGRAM_NANOS: &str = "histogram_nanos";
/// The saved runs of the run-time histogram's buckets, one count per bucket: this prefix and
/// the bucket's upper bound in microseconds (`run_le_us/50` …), `run_le_us/inf` for the last.
const RUN_LE_US: &str = "run_le_us/";

/// The names of the run-time histogram's buckets in the saved totals ([`RUN_LE_US`]).
fn bucket_names() -> impl Iterator<Item = String> {
    RUN_TIME_BUCKETS
        .iter()
        .map(|b| format!("{RUN_LE_US}{}", b.as_micros()))
        .chain(std::iter::once(format!("{RUN_LE_US}inf")))
}

/// The saved count of runs that committed.
const COMMITTED: &str = "committed";
/// The saved count of runs lost to a conflict.
const LOST_TO_CONFLICT: &str = "lost_to_conflict";

impl Pipeline {
    /// A pipeline with nothing loaded yet.
    pub fn new(store: Store, runtime: Runtime) -> Pipeline {
        Pipeline {
            store,
            runtime,
            state: Mutex::new((BTreeMap::new(), Status::default())),
            counts: Mutex::new(BTreeMap::new()),
            applying: Mutex::new(()),
            compiling: Mutex::new(None),
            sinks: OnceLock::new(),
            changes_keep: Mutex::new(crate::config::DEFAULT_CHANGES_KEEP),
            inputs: Mutex::new(None),
            reloads: AtomicUsize::new(0),
        }
    }

    /// Marks a reload under way until the guard is dropped: taken before the reload notes its
    /// inputs and held until it applied or rejected them, so that [`Pipeline::reload_pending`]
    /// says true throughout (the inputs match what was noted before the new version is in).
    pub fn begin_reload(&self) -> ReloadUnderWay<'_> {
        self.reloads.fetch_add(1, Ordering::SeqCst);
        ReloadUnderWay(&self.reloads)
    }

    /// True once a configuration was loaded (the host's first load is done).
    pub fn has_loaded(&self) -> bool {
        self.lock().1.loaded_at.is_some()
    }

    /// Records what the reload's inputs are now: called right before a reload (or the first
    /// load) reads them.
    pub fn note_inputs(&self, config_file: &Path, observers_dir: &Path) {
        let now = inputs(config_file, observers_dir);
        *self.inputs.lock().unwrap_or_else(PoisonError::into_inner) =
            Some((config_file.to_owned(), observers_dir.to_owned(), now));
    }

    /// True while a reload is under way (compiling, or being applied) or coming: the
    /// configuration file or a component changed since a reload last read them (the watcher
    /// waits for the writes to settle first). What `wait` waits for besides the notifications,
    /// so that work retried after a fix runs on the fixed version.
    pub fn reload_pending(&self) -> bool {
        if self.reloads.load(Ordering::SeqCst) > 0 || self.applying.try_lock().is_err() {
            return true;
        }
        let noted = self.inputs.lock().unwrap_or_else(PoisonError::into_inner).clone();
        noted.is_some_and(|(config_file, observers_dir, then)| inputs(&config_file, &observers_dir) != then)
    }

    /// The bindings whose new version is compiling now.
    pub fn compiling_bindings(&self) -> Vec<String> {
        self.compiling.lock().unwrap_or_else(PoisonError::into_inner).iter().map(|(name, ..)| name.clone()).collect()
    }

    /// Runs `sinks` with the pipeline: every [`Pipeline::apply`] from now on applies the
    /// configuration's sinks too (after its bindings compiled and the change log took the
    /// sinks' columns, before the bindings are swapped in). Only the first call counts.
    pub fn attach_sinks(&self, sinks: Arc<Sinks>) {
        let _ = self.sinks.set(sinks);
    }

    /// The sinks attached, if any.
    pub fn sinks(&self) -> Option<&Arc<Sinks>> {
        self.sinks.get()
    }

    /// The store it runs on.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The Wasm runtime its components are compiled with.
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// A loaded binding and the observer running it.
    pub fn loaded(&self, name: &str) -> Option<(Binding, Arc<WasmObserver>)> {
        self.lock().0.get(name).map(|l| (l.binding.clone(), l.observer.clone()))
    }

    /// The names of the loaded bindings.
    pub fn names(&self) -> Vec<String> {
        self.lock().0.keys().cloned().collect()
    }

    /// Validates and compiles every binding of `config`, then swaps the store's observers to
    /// exactly these in one step (a configuration that changes nothing keeps the generation and
    /// swaps nothing, but clears the last error). On any error nothing changes: the previous bindings keep
    /// serving, and the error is returned and kept for [`Pipeline::status`]. Runs in flight
    /// finish on the version they started with. A rejected reload is logged; when nothing was
    /// loaded before (start-up) there is no previous version, and the error, returned but not
    /// logged, says that the pipeline could not be loaded.
    ///
    /// Components compile without the state's lock held: the current generation serves and
    /// [`Pipeline::status`] answers (listing what is compiling) while a large component — a
    /// Python or JavaScript one takes seconds — compiles. Reloads are applied one at a time.
    pub fn apply(&self, config: &Config) -> Result<(), String> {
        let _one_at_a_time = self.applying.lock().unwrap_or_else(PoisonError::into_inner);
        // Only `apply` changes the loaded bindings, and it is not running elsewhere: this copy
        // stays the current state until the swap below.
        let current = self.lock().0.clone();
        let prepared = self.prepare(config, &current);
        let mut state = self.lock();
        let first = state.1.loaded_at.is_none();
        let rejected = |state: &mut (BTreeMap<String, Loaded>, Status), msg: String| {
            state.1.last_error = Some(msg.clone());
            if first {
                // Nothing serves, so there is no "previous version"; the caller (`up`) fails
                // with this error and prints it once, so it is not logged as well.
                let msg = format!("the pipeline could not be loaded: {msg}");
                tracing::debug!("{msg}");
                msg
            } else {
                tracing::error!("reload rejected, previous version keeps serving: {msg}");
                msg
            }
        };
        match prepared {
            Ok(loaded) => {
                let unchanged = loaded.len() == state.0.len()
                    && loaded
                        .iter()
                        .all(|(name, l)| state.0.get(name).is_some_and(|c| Arc::ptr_eq(&c.observer, &l.observer)));
                // The sinks' transforms compile first: a failure here changes nothing.
                let transforms = match self.compile_transforms(config) {
                    Ok(t) => t,
                    Err(e) => return Err(rejected(&mut state, e)),
                };
                // The change log next: a failure here changes nothing else.
                if let Err(e) = self.apply_change_log(config) {
                    return Err(rejected(&mut state, format!("{}: {e}", config.file.display())));
                }
                // The combined columns, before the observers that combine into them run. A
                // declaration whose column still has unfolded deltas cannot go yet: refused.
                let combined: std::collections::BTreeSet<_> = config.combined.iter().cloned().collect();
                if self.store.combined().into_iter().collect::<std::collections::BTreeSet<_>>() != combined
                    && let Err(e) = self.store.set_combined(config.combined.clone())
                {
                    return Err(rejected(&mut state, format!("{}: {e}", config.file.display())));
                }
                // Then the sinks, whose columns the change log now holds (`Config::logged_columns`).
                if let Some(sinks) = self.sinks.get() {
                    sinks.apply(&config.sinks, &transforms);
                    self.drop_orphaned_subscriptions(config);
                }
                if unchanged && state.1.loaded_at.is_some() {
                    // Saved without a change (or changed back): nothing to swap, same generation.
                    tracing::debug!(generation = state.1.generation, "reload: nothing changed");
                    state.1.last_error = None;
                    return Ok(());
                }
                let observers: Vec<(ObserverSpec, Arc<dyn Observer>)> =
                    loaded.values().map(|l| (l.binding.spec(), l.observer.clone() as Arc<dyn Observer>)).collect();
                if let Err(e) = self.store.set_observers(observers) {
                    return Err(rejected(&mut state, format!("{}: {e}", config.file.display())));
                }
                state.1 = Status {
                    bindings: Vec::new(),
                    generation: state.1.generation + 1,
                    last_error: None,
                    loaded_at: Some(SystemTime::now()),
                    compiling: Vec::new(),
                };
                state.0 = loaded;
                tracing::info!(generation = state.1.generation, bindings = state.0.len(), "pipeline loaded");
                Ok(())
            }
            Err(msg) => Err(rejected(&mut state, msg)),
        }
    }

    /// Drops the subscriptions of sinks the configuration no longer has: a subscription holds
    /// the change log behind its position, so one left by a removed sink would stop trimming
    /// for good. (Adding the sink back starts it from the oldest change kept.) Best effort:
    /// the next reload tries again.
    fn drop_orphaned_subscriptions(&self, config: &Config) {
        let subscriptions = match self.store.subscriptions() {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("listing the change feed's subscriptions: {e}");
                return;
            }
        };
        for (name, _) in subscriptions {
            if config.sinks.iter().any(|s| s.name == name) {
                continue;
            }
            match self.store.drop_subscription(&name) {
                Ok(()) => {
                    tracing::info!(subscription = %name, "no sink of that name any more: its subscription is dropped")
                }
                Err(e) => tracing::warn!(subscription = %name, "dropping the subscription of a removed sink: {e}"),
            }
        }
    }

    /// Compiles and instantiates once (under its limits) the transform of every sink of
    /// `config` that has one; an error names the sink and the file.
    fn compile_transforms(&self, config: &Config) -> Result<BTreeMap<String, Arc<SinkTransform>>, String> {
        let mut out = BTreeMap::new();
        for sink in &config.sinks {
            let Some(spec) = &sink.transform else { continue };
            let failed = |e: String| {
                format!("{}: sink {}: transform {}: {e}", config.file.display(), sink.name, spec.wasm.display())
            };
            let compiled = self.runtime.compile_transform_file(&spec.wasm).map_err(|e| failed(format!("{e:#}")))?;
            let transform = self.runtime.transform(&sink.name, &compiled, spec.limits, spec.params.clone());
            transform.check_instantiates().map_err(|e| failed(format!("{e:#}")))?;
            out.insert(sink.name.clone(), Arc::new(transform));
        }
        Ok(out)
    }

    /// Makes the store's logged columns those of `config` (a no-op when they already are).
    fn apply_change_log(&self, config: &Config) -> percolator_store::Result<()> {
        let wanted = config.logged_columns();
        if self.store.change_log() != wanted {
            self.store.set_change_log(wanted)?;
        }
        *self.changes_keep.lock().unwrap_or_else(PoisonError::into_inner) = config.changes_keep();
        Ok(())
    }

    /// How long the change log keeps changes for readers without a subscription.
    pub fn changes_keep(&self) -> Duration {
        *self.changes_keep.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The state, also after a panic while it was held (reload catches panics, and every
    /// change of the state is a plain assignment, so it is never half-updated).
    fn lock(&self) -> MutexGuard<'_, (BTreeMap<String, Loaded>, Status)> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn prepare(&self, config: &Config, current: &BTreeMap<String, Loaded>) -> Result<BTreeMap<String, Loaded>, String> {
        let mut out = BTreeMap::new();
        // The first load says what it compiles, and when each is ready (a large component
        // takes a while, and the host serves nothing else yet); a reload only what is slow.
        let first = current.is_empty() && self.lock().1.loaded_at.is_none();
        let total = config.bindings.len();
        for (i, b) in config.bindings.iter().enumerate() {
            let size = std::fs::metadata(&b.wasm).map(|m| m.len()).unwrap_or(0);
            if first {
                tracing::info!(
                    binding = %b.name,
                    wasm = %b.wasm.display(),
                    "compiling {} of {total}: {} ({:.1} MB)",
                    i + 1,
                    b.name,
                    size as f64 / 1e6
                );
            }
            let started = Instant::now();
            *self.compiling.lock().unwrap_or_else(PoisonError::into_inner) =
                Some((b.name.clone(), b.wasm.clone(), started, i + 1, total));
            if let Some(ms) = std::env::var(COMPILE_DELAY_ENV).ok().and_then(|v| v.parse().ok()) {
                // Tests: a compile as slow as a large component's.
                std::thread::sleep(Duration::from_millis(ms));
            }
            let compiled = self.runtime.compile_file(&b.wasm);
            *self.compiling.lock().unwrap_or_else(PoisonError::into_inner) = None;
            let compiled = compiled.map_err(|e| format!("binding {}: {e:#}", b.name))?;
            let took = started.elapsed();
            if first || took > Duration::from_secs(1) {
                tracing::info!(binding = %b.name, "{} ready in {:.1} s", b.name, took.as_secs_f64());
            }
            // Unchanged binding and component: keep the running observer (and its warm instances).
            let (observer, loaded_at) = match current.get(&b.name) {
                Some(l) if l.binding == *b && l.observer.source_hash() == compiled.source_hash => {
                    (l.observer.clone(), l.loaded_at)
                }
                _ => {
                    let stats = self.stats_of(&b.name)?;
                    let observer = self
                        .runtime
                        .observer(&b.name, &compiled, b.access.clone(), b.limits, b.env.clone())
                        .continuing(stats);
                    observer.check_instantiates().map_err(|e| {
                        format!("binding {}: {} cannot start under its limits: {e:#}", b.name, b.wasm.display())
                    })?;
                    (Arc::new(observer), SystemTime::now())
                }
            };
            out.insert(b.name.clone(), Loaded { binding: b.clone(), observer, loaded_at });
        }
        Ok(out)
    }

    /// The run counters of binding `name`: those it had in this process, else new ones
    /// continuing from the counts saved in the store.
    fn stats_of(&self, name: &str) -> Result<Arc<RunStats>, String> {
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(c) = counts.get(name) {
            return Ok(c.stats.clone());
        }
        let saved = self
            .store
            .saved_totals(&counts_key(name))
            .map_err(|e| format!("binding {name}: reading its saved run counts: {e}"))?;
        let count = |n: &str| saved.get(n).copied().unwrap_or(0);
        let mut buckets = [0; RUN_TIME_BUCKETS.len() + 1];
        for (b, name) in buckets.iter_mut().zip(bucket_names()) {
            *b = count(name.as_str());
        }
        let saved = RunTotals {
            runs: count(RUNS),
            failures: count(FAILURES),
            run_time: Duration::from_nanos(count(RUN_NANOS)),
            cpu_time: Duration::from_nanos(count(CPU_NANOS)),
            buckets,
            histogram_run_time: Duration::from_nanos(count(HISTOGRAM_NANOS)),
        };
        let settled_saved = Settled { committed: count(COMMITTED), lost_to_conflict: count(LOST_TO_CONFLICT) };
        let settled_seen = Settled::of(self.store.run_outcomes().get(name));
        let stats = Arc::new(RunStats::continuing_from(saved));
        counts.insert(name.to_owned(), Counted { stats: stats.clone(), saved, settled_saved, settled_seen });
        Ok(stats)
    }

    /// Saves each binding's run counts in the store (those that changed since the last save),
    /// so that the next host on this store continues them. `up` calls this every 10 s and when
    /// it stops: a host killed without a clean stop loses the counts since the last call. On
    /// an error the other bindings' counts are still saved, and the next call tries again.
    pub fn persist_counts(&self) -> Result<(), String> {
        let mut counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        let mut failed = Vec::new();
        let outcomes = self.store.run_outcomes();
        for (name, c) in counts.iter_mut() {
            let now = c.stats.totals();
            let seen = Settled::of(outcomes.get(name));
            let settled = seen.minus(c.settled_seen);
            if now == c.saved && settled == Settled::default() {
                continue;
            }
            // Added, not written whole: hosts that share the store add to one total.
            let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
            let names: Vec<String> = bucket_names().collect();
            let mut added = vec![
                (RUNS, now.runs.saturating_sub(c.saved.runs)),
                (FAILURES, now.failures.saturating_sub(c.saved.failures)),
                (RUN_NANOS, nanos(now.run_time).saturating_sub(nanos(c.saved.run_time))),
                (CPU_NANOS, nanos(now.cpu_time).saturating_sub(nanos(c.saved.cpu_time))),
                (HISTOGRAM_NANOS, nanos(now.histogram_run_time).saturating_sub(nanos(c.saved.histogram_run_time))),
                (COMMITTED, settled.committed),
                (LOST_TO_CONFLICT, settled.lost_to_conflict),
            ];
            for (i, name) in names.iter().enumerate() {
                added.push((name.as_str(), now.buckets[i].saturating_sub(c.saved.buckets[i])));
            }
            match self.store.add_totals(&counts_key(name), &added) {
                Ok(()) => {
                    c.saved = now;
                    c.settled_saved = c.settled_saved.plus(settled);
                    c.settled_seen = seen;
                }
                Err(e) => failed.push(format!("binding {name}: {e}")),
            }
        }
        if failed.is_empty() { Ok(()) } else { Err(format!("saving run counts: {}", failed.join("; "))) }
    }

    /// Records a reload that failed before reaching [`Pipeline::apply`] (an invalid
    /// configuration file).
    pub fn record_error(&self, msg: String) {
        self.lock().1.last_error = Some(msg);
    }

    /// What is loaded (with each binding's run counters as of now), and the last reload error.
    pub fn status(&self) -> Status {
        let state = self.lock();
        let outcomes = self.store.run_outcomes();
        let counts = self.counts.lock().unwrap_or_else(PoisonError::into_inner);
        let settled = |name: &str| match counts.get(name) {
            Some(c) => c.settled_saved.plus(Settled::of(outcomes.get(name)).minus(c.settled_seen)),
            None => Settled::default(),
        };
        let mut status = state.1.clone();
        status.compiling = self
            .compiling
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(binding, wasm, started, index, total)| Compiling {
                binding: binding.clone(),
                wasm: wasm.clone(),
                elapsed: started.elapsed(),
                index: *index,
                total: *total,
            })
            .collect();
        status.bindings = state
            .0
            .values()
            .map(|l| BindingStatus {
                name: l.binding.name.clone(),
                observes: format!("{}/{}", l.binding.table, l.binding.column),
                table: l.binding.table.clone(),
                column: l.binding.column.clone(),
                kind: l.binding.kind,
                writes: l.binding.access.writes.iter().map(ToString::to_string).collect(),
                wasm: l.binding.wasm.clone(),
                source_hash: l.observer.source_hash().to_owned(),
                loaded_at: l.loaded_at,
                counts: l.observer.stats().counts(),
                settled: settled(&l.binding.name),
            })
            .collect();
        status
    }
}
