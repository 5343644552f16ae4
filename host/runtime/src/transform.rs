//! Sink transforms: a component of the `percolator:sink/transform` world (`wit/sink/sink.wit`)
//! that turns a batch of the change feed's changes into the changes a sink delivers.
//!
//! The same sandbox as observers (`sandbox.rs`: WASI deny-by-default, stdout and stderr
//! captured), the same deadline (of CPU time, by epoch interruption) and memory limiter, and
//! always the deterministic environment: fixed clocks and randomness seeded with
//! [`TRANSFORM_RANDOM_SEED`], in a **fresh instance per batch** — delivery is at least once
//! and a batch may come again split differently after a crash, so what a transform derives
//! must not depend on when it ran or on what it saw before.
//!
//! The host checks the output against the contract before a sink sees it: every change's
//! `commit-ts` is one of the input batch's (the destination applies changes idempotently by
//! that version), the output is in commit-timestamp order, names are valid store names
//! (`percolator_store::validate_table` / `validate_column` / `validate_row`), two changes of
//! one cell at one timestamp carry the same value (else the version is ambiguous), and the output
//! the host lifts out of the guest is bounded by the memory limit (wasmtime's hostcall fuel:
//! a guest that hands back the same megabyte a thousand times fails, it cannot make the host
//! allocate a gigabyte).

use std::collections::BTreeMap;
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use percolator_store::{CellRef, Change, Timestamp};
use wasmtime::component::Component;
use wasmtime::error::Context;
use wasmtime::{Engine, Result, Store, Trap};

use crate::footprint::Footprint;
use crate::host::Budget;
use crate::host::sink::TransformState;
use crate::runtime::{
    EPOCH_TICK, Limits, RunClock, RunStats, Runtime, export_names, limit_error, one_line, without_panics,
};
use crate::sandbox::{ClockMode, Environment, Output, Wasi};
use crate::sink_bindings::{Transform, TransformPre, WitChange};

/// The seed of a transform's WASI random generators, in every batch.
pub const TRANSFORM_RANDOM_SEED: u64 = 0;

/// The world a sink transform must be a component of.
const SINK_WORLD: &str = "percolator:sink/transform@0.1.0";

/// Longest error text of a guest carried into a [`TransformError`].
const MAX_GUEST_ERROR: usize = 1000;

/// A validated, compiled sink-transform component, ready to instantiate.
#[derive(Clone)]
pub struct CompiledTransform {
    pre: TransformPre<TransformState>,
    /// SHA-256 of the file's bytes, hex.
    pub source_hash: String,
    /// What one instance of it creates (checked against the sink's [`Limits`]).
    pub footprint: Footprint,
}

/// Why a batch could not be transformed. A failed batch is not delivered; the sink retries it
/// like a failed delivery. Every variant is the guest's fault (or its limits'): the host and
/// other sinks are unaffected.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TransformError {
    /// The guest trapped: a panic (with its message when the guest logged it), unreachable
    /// code, a stack overflow, an out-of-bounds access.
    Trap(String),
    /// The call ran past the sink's deadline ([`Limits::timeout`]).
    Deadline {
        /// The deadline.
        timeout: Duration,
    },
    /// The guest's memories and tables would have grown past [`Limits::memory_bytes`].
    Memory {
        /// The limit, in bytes.
        limit: usize,
        /// What wasmtime or the guest said.
        message: String,
    },
    /// The output the host would have copied out of the guest is larger than the limit
    /// ([`Limits::memory_bytes`]: a transform hands back at most what it could hold itself).
    OutputTooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
    /// The transform returned `err` with this text.
    Guest(String),
    /// The output broke the contract (`wit/sink/sink.wit`): a change whose commit timestamp is
    /// not one of the batch's, out of commit-timestamp order, with an invalid name, or of the
    /// same cell and timestamp as an earlier one with another value.
    Contract {
        /// The offending change's position in the output.
        index: usize,
        /// What is wrong with it, naming the change.
        message: String,
    },
    /// The component could not be instantiated under the sink's limits (too many instances,
    /// tables or memories, an initial memory over the cap, a start function that traps).
    Instantiate(String),
}

impl fmt::Display for TransformError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TransformError::Trap(m) => write!(f, "the transform trapped: {m}"),
            TransformError::Deadline { timeout } => {
                write!(f, "the transform exceeded its deadline of {} ms", timeout.as_millis())
            }
            TransformError::Memory { limit, message } => {
                write!(f, "the transform exceeded its memory limit of {} MiB ({message})", limit >> 20)
            }
            TransformError::OutputTooLarge { limit } => write!(
                f,
                "the transform's output is larger than its memory limit of {} MiB (the host copies at most that much out \
                 of a guest)",
                limit >> 20
            ),
            TransformError::Guest(m) => write!(f, "the transform returned an error: {m}"),
            TransformError::Contract { index, message } => {
                write!(f, "the transform broke its contract: output change {index}: {message}")
            }
            TransformError::Instantiate(m) => write!(f, "the transform could not be instantiated: {m}"),
        }
    }
}

impl std::error::Error for TransformError {}

impl Runtime {
    /// Reads, validates and compiles the sink transform at `path`: a component of the
    /// `percolator:sink/transform` world, or a core module carrying wit-bindgen's component
    /// type of it (componentized here, as for observers; the cache is shared). Fails on one
    /// line with the reason: a corrupt file, a component of another world (an observer is
    /// named as one), imports the world does not provide, a missing or mistyped `transform`.
    pub fn compile_transform_file(&self, path: &Path) -> Result<CompiledTransform> {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        self.compile_transform(&bytes).with_context(|| format!("loading sink transform {}", path.display()))
    }

    /// Like [`Runtime::compile_transform_file`] for bytes in memory.
    pub fn compile_transform(&self, bytes: &[u8]) -> Result<CompiledTransform> {
        let compiled = self.load(bytes).and_then(|loaded| {
            let pre = without_panics("linking", || self.link_transform(&loaded.component))?;
            Ok(CompiledTransform { pre, source_hash: loaded.source_hash, footprint: loaded.footprint })
        });
        compiled.map_err(|e| wasmtime::Error::msg(one_line(&format!("{e:#}"))))
    }

    fn link_transform(&self, component: &Component) -> Result<TransformPre<TransformState>> {
        let exports = export_names(&self.engine, component);
        if !exports.iter().any(|e| e == "transform") {
            let is = if exports.iter().any(|e| e == "observe") {
                "an observer (it exports `observe`, the export of the world percolator:observer/observer)".to_owned()
            } else if exports.is_empty() {
                "a component that exports nothing".to_owned()
            } else {
                format!(
                    "a component of another world (it exports {})",
                    exports.iter().map(|e| format!("`{e}`")).collect::<Vec<_>>().join(", ")
                )
            };
            wasmtime::bail!(
                "the component is {is}; a sink transform must be a component of the world {SINK_WORLD}, which \
                 exports `transform: func(batch: list<change>) -> result<list<change>, string>`"
            );
        }
        let missing = self.sink_provided.unsatisfied(&self.engine, component);
        if !missing.is_empty() {
            wasmtime::bail!(
                "the component's imports do not match the {SINK_WORLD} world: it imports {} that the world does not \
                 provide: {}; the world `transform` provides {}",
                if missing.len() == 1 { "one item".to_owned() } else { format!("{} items", missing.len()) },
                missing.join(", "),
                self.sink_provided.describe()
            );
        }
        let pre = self
            .sink_linker
            .instantiate_pre(component)
            .with_context(|| format!("the component's imports do not match the {SINK_WORLD} world"))?;
        TransformPre::new(pre).with_context(|| {
            format!(
                "the component's `transform` export does not have the type of the {SINK_WORLD} world's \
                 (func(batch: list<change>) -> result<list<change>, string>)"
            )
        })
    }

    /// Binds a compiled transform to a sink named `name` with its limits and parameters
    /// (`[sink.params]`, the `config` import). [`Limits::pool`] is unused: every batch gets a
    /// fresh instance.
    pub fn transform(
        &self,
        name: &str,
        compiled: &CompiledTransform,
        limits: Limits,
        params: Arc<BTreeMap<String, String>>,
    ) -> SinkTransform {
        SinkTransform {
            name: name.into(),
            engine: self.engine.clone(),
            pre: compiled.pre.clone(),
            source_hash: compiled.source_hash.clone(),
            footprint: compiled.footprint,
            limits,
            env: Environment { params, clock: ClockMode::Fixed, random_seed: Some(TRANSFORM_RANDOM_SEED) },
            ticks: (limits.timeout.as_millis() as u64).div_ceil(EPOCH_TICK.as_millis() as u64).max(1),
            stats: Arc::new(RunStats::default()),
            _ticker: self.ticker.clone(),
        }
    }
}

/// A sink transform bound to a sink: [`SinkTransform::apply`] turns a batch of changes into
/// the changes to deliver. `Send + Sync`; calls are independent (a fresh instance each).
pub struct SinkTransform {
    name: Arc<str>,
    engine: Engine,
    pre: TransformPre<TransformState>,
    source_hash: String,
    footprint: Footprint,
    limits: Limits,
    /// Always deterministic: fixed clocks, seeded randomness, the sink's parameters.
    env: Environment,
    /// Epoch ticks of the deadline.
    ticks: u64,
    /// Calls and failures (a "run" is one batch).
    stats: Arc<RunStats>,
    /// Keeps the engine's epoch ticker alive while this transform may run.
    _ticker: Arc<()>,
}

impl SinkTransform {
    /// SHA-256 of the component file.
    pub fn source_hash(&self) -> &str {
        &self.source_hash
    }

    /// Its call counters (a run is one batch; a failure is any [`TransformError`]).
    pub fn stats(&self) -> &Arc<RunStats> {
        &self.stats
    }

    /// The same transform counting into `stats` (a new version of a sink's transform continues
    /// its predecessor's counters).
    pub fn continuing(mut self, stats: Arc<RunStats>) -> SinkTransform {
        self.stats = stats;
        self
    }

    /// Checks the footprint against the limits and instantiates once (a component over its
    /// limits, or whose start traps, fails here at load rather than at every batch).
    pub fn check_instantiates(&self) -> Result<()> {
        self.footprint.check(&self.limits)?;
        without_panics("instantiating", || {
            self.instantiate().map(drop).map_err(|e| wasmtime::Error::msg(e.to_string()))
        })
    }

    /// The changes to deliver for `batch` (commit-timestamp order, as the feed gives it), in
    /// commit-timestamp order, each carrying the commit timestamp of an input change. An
    /// empty batch gives an empty output without calling the guest. On an error nothing is
    /// delivered; the same batch may be retried (the call had no effect outside its instance,
    /// which is dropped).
    pub fn apply(&self, batch: &[Change]) -> Result<Vec<Change>, TransformError> {
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        let started = RunClock::now();
        let outcome = self.run(batch);
        self.stats.record(started.wall_spent(), started.cpu_spent(), outcome.is_err());
        outcome
    }

    fn instantiate(&self) -> Result<(Store<TransformState>, Transform), TransformError> {
        let wasi = Wasi::new(&self.env);
        let state = TransformState::new(self.name.clone(), Budget::new(&self.limits), self.env.params.clone(), wasi);
        let mut store = Store::new(&self.engine, state);
        store.limiter(|s| &mut s.limits);
        // The deadline is of CPU time, as an observer run's (`RunClock`): a batch waiting for a
        // core is not failed for the wait.
        let timeout = self.limits.timeout;
        store.epoch_deadline_callback(move |ctx| Ok(ctx.data().run_clock.deadline(timeout)));
        store.set_epoch_deadline(self.ticks);
        // What lifting a guest's strings and lists may allocate on the host, per call: the
        // output of `transform`, and every WASI or `log` call.
        store.set_hostcall_fuel(self.limits.memory_bytes);
        match self.pre.instantiate(&mut store) {
            Ok(instance) => Ok((store, instance)),
            Err(e) => {
                let message = limit_error(&format!("{e:#}"), &self.limits).unwrap_or_else(|| format!("{e:#}"));
                let stderr = store.data().wasi.stderr.take();
                Err(TransformError::Instantiate(with_tail(message, &stderr)))
            }
        }
    }

    fn run(&self, batch: &[Change]) -> Result<Vec<Change>, TransformError> {
        let (mut store, instance) = self.instantiate()?;
        let input: Vec<WitChange> = batch
            .iter()
            .map(|c| WitChange {
                table: c.cell.table.clone(),
                row: c.cell.row.clone(),
                column: c.cell.column.clone(),
                value: c.value.clone(),
                commit_ts: c.commit_ts.raw(),
            })
            .collect();
        store.data_mut().run_clock = RunClock::now();
        store.set_epoch_deadline(self.ticks);
        let result = instance.call_transform(&mut store, &input);
        drop(input);
        let data = store.data_mut();
        let (stdout, stderr) = (data.wasi.stdout.take(), data.wasi.stderr.take());
        let (refused, panic) = (data.limits.take_refused(), data.panic.take());
        self.log_output(&stdout, &stderr);
        let output = match result {
            Err(trap) => return Err(self.describe_trap(&trap, refused, panic, &stderr)),
            Ok(Err(text)) => {
                let text = if text.len() > MAX_GUEST_ERROR {
                    format!("{}… ({} bytes)", &text[..text.floor_char_boundary(MAX_GUEST_ERROR)], text.len())
                } else {
                    text
                };
                return Err(TransformError::Guest(with_tail(one_line(&text), &stderr)));
            }
            Ok(Ok(output)) => output,
        };
        drop(store);
        check(batch, output)
    }

    fn describe_trap(
        &self,
        trap: &wasmtime::Error,
        refused: Option<usize>,
        panic: Option<String>,
        stderr: &Output,
    ) -> TransformError {
        let text = format!("{trap:#}");
        let limit = self.limits.memory_bytes;
        match trap.downcast_ref::<Trap>() {
            Some(Trap::Interrupt) => return TransformError::Deadline { timeout: self.limits.timeout },
            _ if text.contains("fuel allocated for hostcalls") => return TransformError::OutputTooLarge { limit },
            _ if let Some(at) = text.find("memory limit") => {
                // wasmtime's text starts with a backtrace; the limiter's reason is enough.
                return TransformError::Memory { limit, message: one_line(&text[at..]) };
            }
            _ => {}
        }
        if let Some(asked) = refused {
            // The guest's allocator gave up after a refused growth (any trap then).
            let message = format!(
                "it asked for {:.1} MiB in all, then trapped: {}",
                asked as f64 / f64::from(1 << 20),
                one_line(&text)
            );
            return TransformError::Memory { limit, message };
        }
        let described = match trap.downcast_ref::<Trap>() {
            Some(Trap::UnreachableCodeReached) => match panic {
                Some(message) => format!("the guest panicked: {message}"),
                None => "unreachable code reached (a panic?)".to_owned(),
            },
            Some(Trap::StackOverflow) => "the guest overflowed its stack".to_owned(),
            _ => one_line(&text),
        };
        TransformError::Trap(with_tail(described, stderr))
    }

    /// A batch's stdout and stderr into the log, a line per line, under the sink's name.
    fn log_output(&self, stdout: &Output, stderr: &Output) {
        let sink = &*self.name;
        for (stream, out) in [("stdout", stdout), ("stderr", stderr)] {
            if out.dropped > 0 {
                tracing::warn!(sink, stream, "{} earlier bytes of this batch's {stream} dropped", out.dropped);
            }
            for line in out.text.lines().filter(|l| !l.trim().is_empty()) {
                match stream {
                    "stdout" => tracing::info!(sink, stream, "{line}"),
                    _ => tracing::warn!(sink, stream, "{line}"),
                }
            }
        }
    }
}

/// A message with the end of stderr, if the guest wrote any.
fn with_tail(message: String, stderr: &Output) -> String {
    match stderr.tail() {
        Some(tail) => format!("{message}; stderr: {tail}"),
        None => message,
    }
}

/// The output, checked against the contract and converted.
fn check(batch: &[Change], output: Vec<WitChange>) -> Result<Vec<Change>, TransformError> {
    let mut stamps: Vec<u64> = batch.iter().map(|c| c.commit_ts.raw()).collect();
    stamps.sort_unstable();
    stamps.dedup();
    let mut previous = 0;
    // The cells of the output changes at `previous` (the output is in timestamp order, so only
    // the current timestamp's are kept): two changes of one cell at one version must agree.
    let mut cells: HashMap<(&str, &[u8], &str), usize> = HashMap::new();
    for (index, c) in output.iter().enumerate() {
        let broken = |what: String| TransformError::Contract { index, message: format!("{} {what}", describe(c)) };
        if stamps.binary_search(&c.commit_ts).is_err() {
            return Err(broken(format!(
                "carries a commit-ts that is none of the batch's ({}): every output change must carry the commit-ts \
                 of an input change it derives from",
                list_stamps(&stamps)
            )));
        }
        if c.commit_ts < previous {
            return Err(broken(format!(
                "comes after a change of commit-ts {previous}: the output must be in commit-timestamp order"
            )));
        }
        if c.commit_ts != previous {
            cells.clear();
        }
        previous = c.commit_ts;
        let names = percolator_store::validate_table(&c.table)
            .and_then(|()| percolator_store::validate_column(&c.column))
            .and_then(|()| percolator_store::validate_row(&c.row));
        if let Err(e) = names {
            return Err(broken(format!("is not a valid store cell: {e}")));
        }
        match cells.entry((&c.table, &c.row, &c.column)) {
            Entry::Vacant(v) => {
                v.insert(index);
            }
            Entry::Occupied(o) if output[*o.get()].value != c.value => {
                return Err(broken(format!(
                    "has another value than output change {} of the same cell and commit-ts: the destination could \
                     not tell which is that version's",
                    o.get()
                )));
            }
            Entry::Occupied(_) => {}
        }
    }
    drop(cells);
    Ok(output
        .into_iter()
        .map(|c| Change {
            cell: CellRef { table: c.table, row: c.row, column: c.column },
            value: c.value,
            commit_ts: Timestamp::from_raw(c.commit_ts),
        })
        .collect())
}

/// An output change, for an error: `(table "t", row "r", column "c", commit-ts N)`, names cut
/// to 64 bytes.
fn describe(c: &WitChange) -> String {
    let cut = |s: &str| -> String {
        if s.len() > 64 { format!("{}…", &s[..s.floor_char_boundary(64)]) } else { s.to_owned() }
    };
    let row = String::from_utf8_lossy(&c.row);
    format!("(table {:?}, row {:?}, column {:?}, commit-ts {})", cut(&c.table), cut(&row), cut(&c.column), c.commit_ts)
}

/// The batch's commit timestamps, for an error (the first and last few of a long list).
fn list_stamps(stamps: &[u64]) -> String {
    let show = |s: &[u64]| s.iter().map(u64::to_string).collect::<Vec<_>>().join(", ");
    if stamps.len() <= 8 {
        show(stamps)
    } else {
        format!("{}, … {}, {} in all", show(&stamps[..4]), show(&stamps[stamps.len() - 2..]), stamps.len())
    }
}
