//! The host's TOML configuration, parsed in two stages: private `raw` structs mirror the file
//! (unknown keys rejected), then [`Config::parse`] validates them into domain types. Every
//! error names the file, the line and the field.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use percolator_api::LOADS_TABLE;
use percolator_runtime::{Access, ClockMode, ColumnRule, Environment, Limits};
use std::sync::Arc;

use percolator_redis::{EtcdCoordination, OracleServiceConfig, RedisBigtable, RedisConfig};
use percolator_store::{
    CombineOp, CombineSpec, CombineType, Durability, NotifyKind, ObserverSpec, Oracle, RedbConfig, Store, StoreConfig,
};

/// A configuration error, located.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file.
    pub file: PathBuf,
    /// 1-based line (0 when the error has no position).
    pub line: usize,
    /// The field (e.g. `binding[2].writes`), if one is at fault.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if self.line > 0 {
            write!(f, ":{}", self.line)?;
        }
        if !self.field.is_empty() {
            write!(f, ": {}", self.field)?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for ConfigError {}

/// The raw, serde-facing mirror of the file. Nothing outside this module sees it.
mod raw {
    use serde::Deserialize;
    use toml::Spanned;

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    pub(super) struct File {
        pub(super) store: Store,
        #[serde(default)]
        pub(super) scanner: Option<Scanner>,
        pub(super) observers: Observers,
        #[serde(default)]
        pub(super) http: Option<Http>,
        #[serde(default)]
        pub(super) log: Option<Log>,
        #[serde(default)]
        pub(super) binding: Vec<Spanned<Binding>>,
        #[serde(default)]
        pub(super) sink: Vec<Spanned<Sink>>,
        #[serde(default)]
        pub(super) changes: Vec<Spanned<Changes>>,
        #[serde(default)]
        pub(super) combine: Vec<Spanned<Combine>>,
    }

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    pub(super) struct Combine {
        pub(super) table: Spanned<String>,
        pub(super) column: Spanned<String>,
        pub(super) op: Spanned<String>,
        #[serde(default, rename = "type")]
        pub(super) value_type: Option<Spanned<String>>,
    }

    /// `[[sink]]`: every kind's fields, all optional here so that a missing one is reported
    /// with its kind's list (`Config::parse` checks which apply).
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    pub(super) struct Sink {
        #[serde(default)]
        pub(super) name: Option<Spanned<String>>,
        #[serde(default)]
        pub(super) kind: Option<Spanned<String>>,
        #[serde(default)]
        pub(super) table: Option<Spanned<String>>,
        #[serde(default)]
        pub(super) columns: Option<Spanned<Vec<String>>>,
        #[serde(default)]
        pub(super) url: Option<Spanned<String>>,
        #[serde(default)]
        pub(super) target: Option<Spanned<String>>,
        #[serde(default)]
        pub(super) path: Option<Spanned<String>>,
        #[serde(default)]
        pub(super) timeout: Option<Spanned<String>>,
        #[serde(default)]
        pub(super) batch: Option<Spanned<i64>>,
        #[serde(default)]
        pub(super) transform: Option<Spanned<String>>,
        #[serde(default)]
        pub(super) outputs: Option<Spanned<Vec<String>>>,
        #[serde(default)]
        pub(super) timeout_ms: Option<Spanned<i64>>,
        #[serde(default)]
        pub(super) memory_mb: Option<Spanned<i64>>,
        #[serde(default)]
        pub(super) params: Option<Spanned<toml::Table>>,
    }

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    pub(super) struct Changes {
        pub(super) table: Spanned<String>,
        pub(super) columns: Spanned<Vec<String>>,
        #[serde(default)]
        pub(super) keep_s: Option<Spanned<i64>>,
    }

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    pub(super) struct Http {
        #[serde(default)]
        pub(super) listen: Option<Spanned<String>>,
        #[serde(default)]
        pub(super) token_file: Option<Spanned<String>>,
    }

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    pub(super) struct Log {
        #[serde(default)]
        pub(super) status_interval_s: Option<Spanned<i64>>,
    }

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    pub(super) struct Store {
        pub(super) path: Spanned<String>,
        #[serde(default)]
        pub(super) durability: Option<Spanned<String>>,
        #[serde(default)]
        pub(super) backend: Option<Spanned<String>>,
        #[serde(default)]
        pub(super) redis: Option<Spanned<Redis>>,
        #[serde(default)]
        pub(super) gc_interval_s: Option<Spanned<i64>>,
        #[serde(default)]
        pub(super) compact_when_quiet_s: Option<Spanned<i64>>,
        #[serde(default)]
        pub(super) cache_mb: Option<Spanned<i64>>,
    }

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    pub(super) struct Redis {
        #[serde(default)]
        pub(super) nodes: Option<Spanned<Vec<String>>>,
        #[serde(default)]
        pub(super) namespace: Option<Spanned<String>>,
        #[serde(default)]
        pub(super) buckets: Option<Spanned<i64>>,
        #[serde(default)]
        pub(super) replicas: Option<Spanned<i64>>,
        #[serde(default)]
        pub(super) degraded_writes: Option<bool>,
        #[serde(default)]
        pub(super) etcd: Option<Spanned<Vec<String>>>,
        #[serde(default)]
        pub(super) oracle_listen: Option<Spanned<String>>,
    }

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    pub(super) struct Scanner {
        pub(super) threads: Option<Spanned<i64>>,
        pub(super) workers: Option<Spanned<i64>>,
    }

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    pub(super) struct Observers {
        pub(super) dir: Spanned<String>,
        #[serde(default)]
        pub(super) cache_dir: Option<Spanned<String>>,
        #[serde(default)]
        pub(super) cache_max_mb: Option<Spanned<i64>>,
    }

    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    pub(super) struct Binding {
        pub(super) name: Spanned<String>,
        pub(super) wasm: Spanned<String>,
        pub(super) table: Spanned<String>,
        pub(super) column: Spanned<String>,
        #[serde(default)]
        pub(super) notify: Option<Spanned<String>>,
        #[serde(default)]
        pub(super) reads: Option<Spanned<Vec<String>>>,
        #[serde(default)]
        pub(super) writes: Option<Spanned<Vec<String>>>,
        #[serde(default)]
        pub(super) max_attempts: Option<Spanned<i64>>,
        #[serde(default)]
        pub(super) timeout_ms: Option<Spanned<i64>>,
        #[serde(default)]
        pub(super) memory_mb: Option<Spanned<i64>>,
        #[serde(default)]
        pub(super) max_instances: Option<Spanned<i64>>,
        #[serde(default)]
        pub(super) max_tables: Option<Spanned<i64>>,
        #[serde(default)]
        pub(super) max_memories: Option<Spanned<i64>>,
        #[serde(default)]
        pub(super) clock: Option<Spanned<String>>,
        #[serde(default)]
        pub(super) random_seed: Option<Spanned<i64>>,
        #[serde(default)]
        pub(super) params: Option<Spanned<toml::Table>>,
        #[serde(default)]
        pub(super) allow_cycle: bool,
    }
}

/// One validated binding of an observer component to a column.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Binding {
    /// Unique name (also the observer's name in the store: its ack column).
    pub name: String,
    /// The component file.
    pub wasm: PathBuf,
    /// Observed table.
    pub table: String,
    /// Observed column.
    pub column: String,
    /// Strong or weak notifications.
    pub kind: NotifyKind,
    /// Declared reads and writes (the observed column is always readable).
    pub access: Access,
    /// Failed runs before a notification moves to dead letters.
    pub max_attempts: u32,
    /// Per-run limits.
    pub limits: Limits,
    /// What the guest sees besides the store: parameters, clocks, randomness.
    pub env: Environment,
}

impl Binding {
    /// What the store needs to know of it (its observer's name, column, kind and attempts).
    pub fn spec(&self) -> ObserverSpec {
        ObserverSpec {
            name: self.name.clone(),
            table: self.table.clone(),
            column: self.column.clone(),
            kind: self.kind,
            max_attempts: self.max_attempts,
        }
    }
}

/// Columns whose changes are logged for `percolator changes` readers (`[[changes]]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChangeLog {
    /// Table.
    pub table: String,
    /// Its logged columns.
    pub columns: Vec<String>,
    /// How long a change stays in the log for readers without a subscription (a sink's
    /// subscription keeps what it has not delivered, however old).
    pub keep: Duration,
}

/// How long logged changes stay for readers without a subscription, by default.
pub const DEFAULT_CHANGES_KEEP: Duration = Duration::from_secs(3600);
/// The longest `keep_s` of a `[[changes]]` entry (30 days).
const MAX_CHANGES_KEEP_S: i64 = 30 * 24 * 3600;

/// The host's HTTP API (`[http]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpConfig {
    /// Address to bind (port 0: any free port). Default `127.0.0.1:7878`.
    pub listen: SocketAddr,
    /// File holding the bearer token every request must carry, if any. The environment
    /// variable [`TOKEN_ENV`] overrides it.
    pub token_file: Option<PathBuf>,
}

/// The environment variable holding the HTTP API's bearer token; it overrides
/// `http.token_file`, for the host and for the command-line client alike.
pub const TOKEN_ENV: &str = "PERCOLATOR_TOKEN";

/// The default `http.listen`.
pub const DEFAULT_LISTEN: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 7878);

impl Default for HttpConfig {
    fn default() -> HttpConfig {
        HttpConfig { listen: DEFAULT_LISTEN, token_file: None }
    }
}

impl HttpConfig {
    /// The bearer token: `PERCOLATOR_TOKEN` if set and not empty, else the contents of
    /// `token_file` (surrounding whitespace removed), else none.
    pub fn token(&self) -> Result<Option<String>, String> {
        if let Ok(t) = std::env::var(TOKEN_ENV)
            && !t.trim().is_empty()
        {
            return Ok(Some(t.trim().to_owned()));
        }
        let Some(file) = &self.token_file else { return Ok(None) };
        let token = read_token(file)?;
        Ok(Some(token))
    }
}

fn read_token(file: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("token file {}: {e}", file.display()))?;
    let token = text.trim();
    if token.is_empty() {
        return Err(format!("token file {} is empty", file.display()));
    }
    if token.chars().any(|c| c.is_control() || c == ' ') {
        return Err(format!("token file {}: the token must be one line without spaces", file.display()));
    }
    Ok(token.to_owned())
}

/// Where the store's cells live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Backend {
    /// The embedded redb file at [`Config::store_path`].
    Redb {
        /// fsync per group commit or not.
        durability: Durability,
        /// `[store] compact_when_quiet_s` ([`RedbConfig::compact_when_quiet`]: 30 s by default,
        /// `None` when 0).
        compact_when_quiet: Option<Duration>,
        /// `[store] cache_mb`, in bytes ([`RedbConfig::cache_bytes`]: redb's page cache, at
        /// most; 1 GiB by default).
        cache_bytes: usize,
    },
    /// A Redis Cluster (`[store.redis]`); [`Config::store_path`] then only anchors this host's
    /// local files (the endpoint file, the compiled-component cache).
    Redis(RedisSettings),
}

/// `[store.redis]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedisSettings {
    /// Seed nodes, `host:port` (from `nodes`, else the `PERCOLATOR_REDIS` environment variable).
    pub nodes: Vec<String>,
    /// The store's key prefix on the cluster.
    pub namespace: String,
    /// Buckets, used when the namespace is created.
    pub buckets: u32,
    /// Replicas each commit waits for.
    pub replicas: u32,
    /// Whether a master that lost a replica waits only for those it has (`RedisConfig::degraded_writes`).
    pub degraded_writes: bool,
    /// etcd client URLs (from `etcd`, else the `PERCOLATOR_ETCD` environment variable): with
    /// them the timestamp oracle is the shared service and any number of hosts may serve the
    /// store; without, one host at a time.
    pub etcd: Vec<String>,
    /// Where this host's oracle candidate listens (it must be reachable by the other hosts).
    pub oracle_listen: SocketAddr,
}

/// The environment variable naming the Redis seed nodes when `[store.redis] nodes` is absent
/// (`scripts/dev-cluster` writes it).
pub const REDIS_NODES_ENV: &str = "PERCOLATOR_REDIS";

/// The environment variable naming the etcd endpoints when `[store.redis] etcd` is absent.
pub const ETCD_ENV: &str = "PERCOLATOR_ETCD";

/// The comma-separated list in environment variable `var` (as `scripts/dev-cluster` writes
/// [`REDIS_NODES_ENV`] and [`ETCD_ENV`]), or `None` if it is unset or blank.
pub fn env_list(var: &str) -> Option<Vec<String>> {
    let v = std::env::var(var).ok().filter(|v| !v.trim().is_empty())?;
    Some(v.split(',').map(|s| s.trim().to_string()).collect())
}

impl Backend {
    /// Opens the store this backend describes, at `path` for redb.
    pub fn open(&self, path: &Path, config: StoreConfig) -> percolator_store::Result<Store> {
        match self {
            Backend::Redb { durability, compact_when_quiet, cache_bytes } => Store::open(
                path,
                config,
                RedbConfig {
                    durability: *durability,
                    compact_when_quiet: *compact_when_quiet,
                    cache_bytes: *cache_bytes,
                    ..RedbConfig::default()
                },
            ),
            Backend::Redis(r) => {
                let backend = Arc::new(RedisBigtable::open(RedisConfig {
                    nodes: r.nodes.clone(),
                    namespace: r.namespace.clone(),
                    buckets: r.buckets,
                    replicas: r.replicas,
                    degraded_writes: r.degraded_writes,
                    ..RedisConfig::default()
                })?);
                if r.etcd.is_empty() {
                    return Store::with_backend(backend, config);
                }
                let oracle = EtcdCoordination::with_candidate(OracleServiceConfig {
                    etcd: r.etcd.clone(),
                    namespace: r.namespace.clone(),
                    listen: r.oracle_listen,
                    ..OracleServiceConfig::default()
                })
                .map(Oracle::new)?;
                Store::with_oracle(backend, oracle, config)
            }
        }
    }

    /// How a user would name the store in a message: its file, or its namespace on the cluster.
    pub fn describe(&self, path: &Path) -> String {
        match self {
            Backend::Redb { .. } => path.display().to_string(),
            Backend::Redis(r) => format!("namespace {:?} on the Redis Cluster at {}", r.namespace, r.nodes.join(",")),
        }
    }
}

/// The largest `observers.cache_max_mb` (16 TiB).
const MAX_CACHE_MB: i64 = 1 << 24;

/// How often `up` logs its status line unless `[log] status_interval_s` says.
pub const DEFAULT_STATUS_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// The validated configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// The file it came from.
    pub file: PathBuf,
    /// The redb store file.
    pub store_path: PathBuf,
    /// Where the cells live (redb, with its durability, or Redis).
    pub backend: Backend,
    /// Scanner threads.
    pub scanner_threads: usize,
    /// Observer runs in flight (worker threads fed by the scanners; 0: runs on the scanner
    /// threads).
    pub observer_workers: usize,
    /// How often old versions are collected (`None`: only when asked, `percolator gc`).
    pub gc_interval: Option<Duration>,
    /// How often `up` logs its status line (`[log] status_interval_s`, 10 s by default; `None`:
    /// never). A line is logged only if a count in it changed since the last one.
    pub status_log_interval: Option<Duration>,
    /// Folder of observer components (watched for hot reload).
    pub observers_dir: PathBuf,
    /// Compiled-component cache (never watched).
    pub cache_dir: PathBuf,
    /// What the compiled components in the cache may take (`observers.cache_max_mb`): the
    /// least recently used are removed past it.
    pub cache_max_bytes: u64,
    /// The HTTP API.
    pub http: HttpConfig,
    /// Bindings, in file order.
    pub bindings: Vec<Binding>,
    /// Sinks (`[[sink]]`), in file order: where changes of the store are delivered
    /// (`crate::sinks`). Hot-reloaded with the bindings.
    pub sinks: Vec<Sink>,
    /// Logged columns (`[[changes]]`), in file order.
    pub changes: Vec<ChangeLog>,
    /// Combined columns (`[[combine]]`), in file order: added to by `txn.combine`, folded by
    /// the store (`percolator_store::Store::set_combined`).
    pub combined: Vec<CombineSpec>,
}

struct Ctx<'a> {
    file: &'a Path,
    src: &'a str,
}

impl Ctx<'_> {
    fn err(&self, span: Option<Range<usize>>, field: impl Into<String>, message: impl Into<String>) -> ConfigError {
        let line = span.map(|s| self.src[..s.start.min(self.src.len())].matches('\n').count() + 1).unwrap_or(0);
        ConfigError { file: self.file.to_owned(), line, field: field.into(), message: message.into() }
    }

    /// An optional size key in MiB, from 1 to `max`, as bytes (`None`: not set); out of range, an
    /// error naming `field` whose message ends with `(unit)`.
    fn mib(
        &self,
        value: Option<&toml::Spanned<i64>>,
        field: &str,
        max: i64,
        unit: &str,
    ) -> Result<Option<u64>, ConfigError> {
        match value {
            None => Ok(None),
            Some(m) if (1..=max).contains(m.get_ref()) => Ok(Some((*m.get_ref() as u64) << 20)),
            Some(m) => Err(self.err(Some(m.span()), field, format!("must be between 1 and {max} ({unit})"))),
        }
    }
}

impl Config {
    /// True if `self` and `other` agree on everything except the bindings (what a hot reload
    /// can apply).
    pub fn same_host_settings(&self, other: &Config) -> bool {
        self.restart_changes(other).is_empty()
    }

    /// The settings a hot reload cannot apply that differ between `self` (the running host's)
    /// and `other`, each as `key (old → new)`: what the message of a rejected reload names.
    pub fn restart_changes(&self, other: &Config) -> Vec<String> {
        let mut out = Vec::new();
        let mut differs = |key: &str, a: String, b: String| {
            if a != b {
                out.push(format!("{key} ({a} → {b})"));
            }
        };
        differs("store.path", self.store_path.display().to_string(), other.store_path.display().to_string());
        // The compaction and cache settings by their own keys, not as a difference of the
        // whole backend.
        let backend = |b: &Backend| match b {
            Backend::Redb { durability, .. } => {
                format!("{:?}", Backend::Redb { durability: *durability, compact_when_quiet: None, cache_bytes: 0 })
            }
            other => format!("{other:?}"),
        };
        differs("store.backend", backend(&self.backend), backend(&other.backend));
        let quiet = |b: &Backend| match b {
            Backend::Redb { compact_when_quiet: Some(d), .. } => format!("{}s", d.as_secs()),
            _ => "off".to_owned(),
        };
        differs("store.compact_when_quiet_s", quiet(&self.backend), quiet(&other.backend));
        let cache = |b: &Backend| match b {
            Backend::Redb { cache_bytes, .. } => (cache_bytes >> 20).to_string(),
            _ => "none".to_owned(),
        };
        differs("store.cache_mb", cache(&self.backend), cache(&other.backend));
        let gc = |g: Option<Duration>| g.map_or("off".to_owned(), |d| format!("{}s", d.as_secs()));
        differs("store.gc_interval_s", gc(self.gc_interval), gc(other.gc_interval));
        differs("log.status_interval_s", gc(self.status_log_interval), gc(other.status_log_interval));
        differs("scanner.threads", self.scanner_threads.to_string(), other.scanner_threads.to_string());
        differs("scanner.workers", self.observer_workers.to_string(), other.observer_workers.to_string());
        differs("observers.dir", self.observers_dir.display().to_string(), other.observers_dir.display().to_string());
        differs("the cache folder", self.cache_dir.display().to_string(), other.cache_dir.display().to_string());
        differs(
            "observers.cache_max_mb",
            (self.cache_max_bytes >> 20).to_string(),
            (other.cache_max_bytes >> 20).to_string(),
        );
        differs("http.listen", self.http.listen.to_string(), other.http.listen.to_string());
        let token = |t: &Option<PathBuf>| t.as_ref().map_or("none".to_owned(), |p| p.display().to_string());
        differs("http.token_file", token(&self.http.token_file), token(&other.http.token_file));
        out
    }

    /// The file a running host writes its base URL to: the store path with `.endpoint`
    /// appended (`store.redb` → `store.redb.endpoint`), so stores that differ only in their
    /// extension have their own.
    pub fn endpoint_file(&self) -> PathBuf {
        let mut name = self.store_path.as_os_str().to_owned();
        name.push(".endpoint");
        PathBuf::from(name)
    }

    /// The folder where a host keeps its sinks' refused batches (dead letters): the store path
    /// with `.sinks` appended, one folder per sink inside.
    pub fn sinks_dir(&self) -> PathBuf {
        let mut name = self.store_path.as_os_str().to_owned();
        name.push(".sinks");
        PathBuf::from(name)
    }

    /// Reads and validates the file at `path`. Relative paths in it are relative to its folder.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let src = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: path.to_owned(),
            line: 0,
            field: String::new(),
            message: format!("cannot read: {e}"),
        })?;
        Config::parse(path, &src)
    }

    /// Validates `src` as if read from `file`.
    pub fn parse(file: &Path, src: &str) -> Result<Config, ConfigError> {
        let cx = Ctx { file, src };
        let raw: raw::File = toml::from_str(src).map_err(|e| toml_error(&cx, &e))?;
        let base = file.parent().map(Path::to_path_buf).unwrap_or_default();
        let rel = |p: &str| if Path::new(p).is_absolute() { PathBuf::from(p) } else { base.join(p) };

        let backend = parse_backend(&cx, &raw.store)?;
        let gc_interval = match &raw.store.gc_interval_s {
            None => Some(Duration::from_secs(60)),
            Some(s) if *s.get_ref() == 0 => None,
            Some(s) if (1..=86_400).contains(s.get_ref()) => Some(Duration::from_secs(*s.get_ref() as u64)),
            Some(s) => {
                return Err(cx.err(Some(s.span()), "store.gc_interval_s", "must be between 0 (off) and 86400"));
            }
        };
        let status_log_interval = match raw.log.as_ref().and_then(|l| l.status_interval_s.as_ref()) {
            None => Some(DEFAULT_STATUS_LOG_INTERVAL),
            Some(s) if *s.get_ref() == 0 => None,
            Some(s) if (1..=86_400).contains(s.get_ref()) => Some(Duration::from_secs(*s.get_ref() as u64)),
            Some(s) => {
                return Err(cx.err(Some(s.span()), "log.status_interval_s", "must be between 0 (off) and 86400"));
            }
        };
        let (threads, workers) = raw.scanner.map(|s| (s.threads, s.workers)).unwrap_or_default();
        let scanner_threads = match threads {
            None => 2,
            Some(t) if (1..=64).contains(t.get_ref()) => *t.get_ref() as usize,
            Some(t) => return Err(cx.err(Some(t.span()), "scanner.threads", "must be between 1 and 64")),
        };
        let observer_workers = match workers {
            None => 8,
            Some(t) if (0..=256).contains(t.get_ref()) => *t.get_ref() as usize,
            Some(t) => return Err(cx.err(Some(t.span()), "scanner.workers", "must be between 0 and 256")),
        };
        // Runs in flight at once: the warm instances an observer keeps.
        let runs_in_flight = if observer_workers == 0 { scanner_threads } else { observer_workers };
        let observers_dir = rel(raw.observers.dir.get_ref());
        if !observers_dir.is_dir() {
            return Err(cx.err(
                Some(raw.observers.dir.span()),
                "observers.dir",
                format!("{} is not a directory", observers_dir.display()),
            ));
        }
        let store_path = rel(raw.store.path.get_ref());
        let cache_dir = match &raw.observers.cache_dir {
            Some(c) => rel(c.get_ref()),
            None => store_path.with_extension("cache"),
        };
        if cache_dir.starts_with(&observers_dir) {
            return Err(cx.err(
                raw.observers.cache_dir.as_ref().map(|c| c.span()),
                "observers.cache_dir",
                "must not be inside observers.dir (the watched folder)",
            ));
        }

        let cache_max_bytes = cx
            .mib(raw.observers.cache_max_mb.as_ref(), "observers.cache_max_mb", MAX_CACHE_MB, "megabytes")?
            .unwrap_or(percolator_runtime::DEFAULT_CACHE_MAX_BYTES);

        let http = parse_http(&cx, raw.http.as_ref(), &rel)?;

        let mut bindings = Vec::new();
        let mut names: HashMap<String, usize> = HashMap::new();
        let mut spans = Vec::new();
        for (i, b) in raw.binding.iter().enumerate() {
            let span = b.span();
            let b = b.get_ref();
            let f = |name: &str| format!("binding[{i}].{name}");
            let name = b.name.get_ref().clone();
            if let Err(e) = percolator_store::validate_observer_name(&name) {
                return Err(cx.err(Some(b.name.span()), f("name"), e.to_string()));
            }
            if let Some(first) = names.insert(name.clone(), i) {
                return Err(cx.err(
                    Some(b.name.span()),
                    f("name"),
                    format!("{name:?} is already used by binding[{first}]"),
                ));
            }
            let plain = Path::new(b.wasm.get_ref()).file_name().is_some_and(|f| f == b.wasm.get_ref().as_str());
            if !plain {
                return Err(cx.err(
                    Some(b.wasm.span()),
                    f("wasm"),
                    format!(
                        "{:?} must be a file name in observers.dir (only that folder is watched)",
                        b.wasm.get_ref()
                    ),
                ));
            }
            let wasm = observers_dir.join(b.wasm.get_ref());
            if wasm.is_dir() {
                return Err(cx.err(
                    Some(b.wasm.span()),
                    f("wasm"),
                    format!("{} is a folder, not a file", wasm.display()),
                ));
            }
            if !wasm.exists() {
                return Err(cx.err(Some(b.wasm.span()), f("wasm"), format!("{} does not exist", wasm.display())));
            }
            percolator_store::validate_table(b.table.get_ref())
                .map_err(|e| cx.err(Some(b.table.span()), f("table"), e.to_string()))?;
            if b.table.get_ref() == LOADS_TABLE {
                return Err(cx.err(
                    Some(b.table.span()),
                    f("table"),
                    format!(
                        "table {:?} is reserved: it holds the checkpoints of loads, not data; bind a table of your own",
                        LOADS_TABLE
                    ),
                ));
            }
            percolator_store::validate_column(b.column.get_ref())
                .map_err(|e| cx.err(Some(b.column.span()), f("column"), e.to_string()))?;
            if !has_family(b.column.get_ref()) {
                let column = b.column.get_ref();
                let hint = if column.contains(':') {
                    String::new()
                } else {
                    format!(" (the field {column} is loaded as \"raw:{column}\")")
                };
                return Err(cx.err(
                    Some(b.column.span()),
                    f("column"),
                    format!(
                        "{column:?} is not a \"family:qualifier\" column like those loads write{hint}, so this binding would never be notified"
                    ),
                ));
            }
            let kind = match b.notify.as_ref().map(|n| (n.get_ref().as_str(), n.span())) {
                None | Some(("strong", _)) => NotifyKind::Strong,
                Some(("weak", _)) => NotifyKind::Weak,
                Some((other, span)) => {
                    return Err(cx.err(
                        Some(span),
                        f("notify"),
                        format!("{other:?} is not one of \"strong\", \"weak\""),
                    ));
                }
            };
            let rules =
                |list: &Option<toml::Spanned<Vec<String>>>, field: &str| -> Result<Vec<ColumnRule>, ConfigError> {
                    let Some(list) = list else { return Ok(Vec::new()) };
                    list.get_ref()
                        .iter()
                        .map(|s| ColumnRule::parse(s).map_err(|e| cx.err(Some(list.span()), f(field), e)))
                        .collect()
                };
            let mut reads = rules(&b.reads, "reads")?;
            let writes = rules(&b.writes, "writes")?;
            reads.push(ColumnRule {
                table: b.table.get_ref().clone(),
                column: b.column.get_ref().clone(),
                prefix: false,
            });
            let int = |v: &Option<toml::Spanned<i64>>, field: &str, range: Range<i64>, default: i64| match v {
                None => Ok(default),
                Some(x) if range.contains(x.get_ref()) => Ok(*x.get_ref()),
                Some(x) => Err(cx.err(
                    Some(x.span()),
                    f(field),
                    format!("{} is out of range {}..={}", x.get_ref(), range.start, range.end - 1),
                )),
            };
            let max_attempts = int(&b.max_attempts, "max_attempts", 1..1001, 5)? as u32;
            let timeout_ms = int(&b.timeout_ms, "timeout_ms", 1..600_001, 1000)? as u64;
            let memory_mb =
                int(&b.memory_mb, "memory_mb", 1..4097, (Limits::DEFAULT.memory_bytes >> 20) as i64)? as usize;
            let count = |v, field, default: u32| int(v, field, 1..10_001, i64::from(default)).map(|n| n as u32);
            let instances = count(&b.max_instances, "max_instances", Limits::DEFAULT.instances)?;
            let tables = count(&b.max_tables, "max_tables", Limits::DEFAULT.tables)?;
            let memories = count(&b.max_memories, "max_memories", Limits::DEFAULT.memories)?;
            let clock = match b.clock.as_ref().map(|c| (c.get_ref().as_str(), c.span())) {
                None | Some(("real", _)) => ClockMode::Real,
                Some(("fixed", _)) => ClockMode::Fixed,
                Some((other, span)) => {
                    return Err(cx.err(Some(span), f("clock"), format!("{other:?} is not one of \"real\", \"fixed\"")));
                }
            };
            let random_seed = match &b.random_seed {
                None => None,
                Some(x) if *x.get_ref() >= 0 => Some(*x.get_ref() as u64),
                Some(x) => {
                    return Err(cx.err(Some(x.span()), f("random_seed"), format!("{} is negative", x.get_ref())));
                }
            };
            let params = match &b.params {
                None => BTreeMap::new(),
                Some(table) => parse_params(table.get_ref()).map_err(|e| cx.err(Some(table.span()), f("params"), e))?,
            };
            bindings.push(Binding {
                name,
                wasm,
                table: b.table.get_ref().clone(),
                column: b.column.get_ref().clone(),
                kind,
                access: Access { reads, writes },
                max_attempts,
                limits: Limits {
                    timeout: Duration::from_millis(timeout_ms),
                    memory_bytes: memory_mb << 20,
                    instances,
                    tables,
                    memories,
                    pool: runs_in_flight,
                },
                env: Environment { params: Arc::new(params), clock, random_seed },
            });
            spans.push((span, b.allow_cycle));
        }
        check_columns(&cx, &bindings, &spans)?;
        check_cycles(&cx, &bindings, &spans)?;
        let sinks = parse_sinks(&cx, &raw.sink, &rel, &observers_dir)?;
        let changes = parse_changes(&cx, &raw.changes)?;
        let combined = parse_combined(&cx, &raw.combine, &bindings)?;
        Ok(Config {
            file: file.to_owned(),
            store_path,
            backend,
            scanner_threads,
            observer_workers,
            gc_interval,
            status_log_interval,
            observers_dir,
            cache_dir,
            cache_max_bytes,
            http,
            bindings,
            sinks,
            changes,
            combined,
        })
    }

    /// Every `(table, column)` the change log must hold for this configuration: those of the
    /// `[[changes]]` entries and those the `[[sink]]`s deliver.
    pub fn logged_columns(&self) -> std::collections::BTreeSet<(String, String)> {
        let changes = self.changes.iter().flat_map(|c| c.columns.iter().map(|col| (c.table.clone(), col.clone())));
        let sinks = self.sinks.iter().flat_map(|s| s.columns.iter().map(|col| (s.table.clone(), col.clone())));
        changes.chain(sinks).collect()
    }

    /// How long the change log keeps changes for readers without a subscription: the longest
    /// `keep_s` of the `[[changes]]` entries ([`DEFAULT_CHANGES_KEEP`] when none says).
    pub fn changes_keep(&self) -> Duration {
        self.changes.iter().map(|c| c.keep).max().unwrap_or(DEFAULT_CHANGES_KEEP)
    }
}

/// `[[changes]]`: a table and its logged columns (each a `family:qualifier` user column, listed
/// once), and how long their changes stay.
fn parse_changes(cx: &Ctx<'_>, raw: &[toml::Spanned<raw::Changes>]) -> Result<Vec<ChangeLog>, ConfigError> {
    let mut out: Vec<ChangeLog> = Vec::new();
    let mut seen: HashMap<(String, String), usize> = HashMap::new();
    for (i, c) in raw.iter().enumerate() {
        let c = c.get_ref();
        let f = |name: &str| format!("changes[{i}].{name}");
        let table = c.table.get_ref();
        percolator_store::validate_table(table).map_err(|e| cx.err(Some(c.table.span()), f("table"), e.to_string()))?;
        if table == LOADS_TABLE {
            return Err(cx.err(
                Some(c.table.span()),
                f("table"),
                format!("table {LOADS_TABLE:?} holds load checkpoints, not data"),
            ));
        }
        if c.columns.get_ref().is_empty() {
            return Err(cx.err(Some(c.columns.span()), f("columns"), "is empty: name the columns to log"));
        }
        for column in c.columns.get_ref() {
            percolator_store::validate_column(column)
                .map_err(|e| cx.err(Some(c.columns.span()), f("columns"), format!("{column:?}: {e}")))?;
            if !has_family(column) {
                return Err(cx.err(
                    Some(c.columns.span()),
                    f("columns"),
                    format!("{column:?} is not a \"family:qualifier\" column"),
                ));
            }
            if let Some(j) = seen.insert((table.clone(), column.clone()), i) {
                return Err(cx.err(
                    Some(c.columns.span()),
                    f("columns"),
                    format!("{table}/{column} is already logged by changes[{j}]"),
                ));
            }
        }
        let keep = match &c.keep_s {
            None => DEFAULT_CHANGES_KEEP,
            Some(k) if (1..=MAX_CHANGES_KEEP_S).contains(k.get_ref()) => Duration::from_secs(*k.get_ref() as u64),
            Some(k) => {
                return Err(cx.err(
                    Some(k.span()),
                    f("keep_s"),
                    format!("{} is not between 1 and {MAX_CHANGES_KEEP_S} (30 days)", k.get_ref()),
                ));
            }
        };
        out.push(ChangeLog { table: table.clone(), columns: c.columns.get_ref().clone(), keep });
    }
    Ok(out)
}

/// `[[combine]]`: a combined column — a table, a `family:qualifier` column, an op (`sum`, `min`,
/// `max`, `set`) and a type (`i64` or `f64` for the numeric ops, the default `i64`; `set` for
/// `set`, its default). Declared once; no weak binding may observe it (its total is written).
fn parse_combined(
    cx: &Ctx<'_>,
    raw: &[toml::Spanned<raw::Combine>],
    bindings: &[Binding],
) -> Result<Vec<CombineSpec>, ConfigError> {
    let mut out: Vec<CombineSpec> = Vec::new();
    let mut seen: HashMap<(String, String), usize> = HashMap::new();
    for (i, c) in raw.iter().enumerate() {
        let span = c.span();
        let c = c.get_ref();
        let f = |name: &str| format!("combine[{i}].{name}");
        let table = c.table.get_ref();
        percolator_store::validate_table(table).map_err(|e| cx.err(Some(c.table.span()), f("table"), e.to_string()))?;
        if table == LOADS_TABLE {
            return Err(cx.err(
                Some(c.table.span()),
                f("table"),
                format!("table {LOADS_TABLE:?} holds load checkpoints, not data"),
            ));
        }
        let column = c.column.get_ref();
        percolator_store::validate_column(column)
            .map_err(|e| cx.err(Some(c.column.span()), f("column"), e.to_string()))?;
        if !has_family(column) {
            return Err(cx.err(
                Some(c.column.span()),
                f("column"),
                format!("{column:?} is not a \"family:qualifier\" column"),
            ));
        }
        let op = CombineOp::parse(c.op.get_ref()).ok_or_else(|| {
            cx.err(Some(c.op.span()), f("op"), format!("{:?} is not one of sum, min, max, set", c.op.get_ref()))
        })?;
        let value_type = match &c.value_type {
            Some(t) => CombineType::parse(t.get_ref()).ok_or_else(|| {
                cx.err(Some(t.span()), f("type"), format!("{:?} is not one of i64, f64, set", t.get_ref()))
            })?,
            None if op == CombineOp::Set => CombineType::Set,
            None => CombineType::I64,
        };
        let type_span = c.value_type.as_ref().map_or(c.op.span(), |t| t.span());
        let spec = CombineSpec::new(table, column, op, value_type).map_err(|_| {
            cx.err(
                Some(type_span),
                f("type"),
                format!(
                    "op {op} does not apply to type {value_type} (sum, min and max take i64 or f64; set takes set)"
                ),
            )
        })?;
        if let Some(j) = seen.insert((table.clone(), column.clone()), i) {
            return Err(cx.err(
                Some(span),
                f("column"),
                format!("{table}/{column} is already declared by combine[{j}]"),
            ));
        }
        if let Some(b) =
            bindings.iter().find(|b| b.table == *table && b.column == *column && b.kind == NotifyKind::Weak)
        {
            return Err(cx.err(
                Some(span),
                f("column"),
                format!(
                    "{table}/{column} is observed by the weak binding {:?}: a combined column's total is written, \
                     so bind it with notify = \"strong\"",
                    b.name
                ),
            ));
        }
        out.push(spec);
    }
    Ok(out)
}

/// Longest parameter key and value, in bytes.
const MAX_PARAM_BYTES: usize = 4096;

/// `[binding.params]`: a table of scalars, each as text (a string as is, a number or a boolean
/// as TOML writes it). Nested tables and lists are refused: the guest reads strings.
fn parse_params(table: &toml::Table) -> Result<BTreeMap<String, String>, String> {
    let mut params = BTreeMap::new();
    for (key, value) in table {
        let text = match value {
            toml::Value::String(s) => s.clone(),
            toml::Value::Integer(i) => i.to_string(),
            toml::Value::Float(x) => x.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            toml::Value::Datetime(d) => d.to_string(),
            toml::Value::Array(_) | toml::Value::Table(_) => {
                return Err(format!(
                    "{key:?} is a {}: parameters are strings, numbers or booleans (the guest reads them as text)",
                    if value.is_array() { "list" } else { "table" }
                ));
            }
        };
        if key.len() > MAX_PARAM_BYTES || text.len() > MAX_PARAM_BYTES {
            return Err(format!("{key:?}: a parameter's key and value are at most {MAX_PARAM_BYTES} bytes each"));
        }
        params.insert(key.clone(), text);
    }
    Ok(params)
}

/// A bound column is `family:qualifier`, both parts non-empty: what loads write (a field
/// without a family gets `--family`, default `raw`) and what the examples observe.
fn has_family(column: &str) -> bool {
    column.split_once(':').is_some_and(|(family, qualifier)| !family.is_empty() && !qualifier.is_empty())
}

/// A serde error of the raw structs, located: a type mismatch names the field (`scanner.threads`,
/// `binding[1].reads`) and says what was expected and what was found, instead of serde's
/// `invalid type: string "two", expected i64`.
fn toml_error(cx: &Ctx<'_>, e: &toml::de::Error) -> ConfigError {
    let message = e.message().trim_end();
    let Some(span) = e.span() else { return cx.err(None, "", message) };
    let mismatch = ["invalid type:", "invalid value:", "invalid length"].iter().any(|p| message.starts_with(p));
    let located = if mismatch { toml::de::DeTable::parse(cx.src).ok() } else { None };
    let Some((field, key, value)) = located.as_ref().and_then(|doc| locate(doc.get_ref(), "", &span)) else {
        return cx.err(Some(span), "", message);
    };
    let message = match (message.strip_prefix("invalid type:"), key.and_then(expected_type)) {
        (Some(_), Some(expected)) => {
            let hint = match value {
                toml::de::DeValue::String(s) if matches!(key, Some("reads" | "writes")) => format!(" (write [{s:?}])"),
                _ => String::new(),
            };
            format!("expected {expected}, found {}{hint}", describe_value(value))
        }
        (Some(rest), None) => match rest.rsplit_once(", expected ") {
            Some((_, expected)) => format!("expected {}, found {}", serde_expected(expected), describe_value(value)),
            None => message.to_owned(),
        },
        (None, _) => message.to_owned(),
    };
    cx.err(Some(span), field, message)
}

/// The most `[store] cache_mb` takes: 64 GiB.
pub(crate) const CACHE_MB_MAX: i64 = 64 << 10;

fn parse_backend(cx: &Ctx<'_>, store: &raw::Store) -> Result<Backend, ConfigError> {
    let durability = match store.durability.as_ref().map(|d| (d.get_ref().as_str(), d.span())) {
        None | Some(("fsync", _)) => Durability::Fsync,
        Some(("none", _)) => Durability::None,
        Some((other, span)) => {
            return Err(cx.err(Some(span), "store.durability", format!("{other:?} is not one of \"fsync\", \"none\"")));
        }
    };
    let kind = store.backend.as_ref().map(|b| (b.get_ref().as_str(), b.span()));
    match kind {
        None | Some(("redb", _)) => {
            if let Some(r) = &store.redis {
                return Err(cx.err(
                    Some(r.span()),
                    "store.redis",
                    "is set but store.backend is not \"redis\" (add backend = \"redis\" to [store])",
                ));
            }
            let compact_when_quiet = match &store.compact_when_quiet_s {
                None => RedbConfig::default().compact_when_quiet,
                Some(s) if *s.get_ref() == 0 => None,
                Some(s) if (1..=86_400).contains(s.get_ref()) => Some(Duration::from_secs(*s.get_ref() as u64)),
                Some(s) => {
                    return Err(cx.err(
                        Some(s.span()),
                        "store.compact_when_quiet_s",
                        "must be between 0 (off) and 86400",
                    ));
                }
            };
            let cache_bytes =
                match cx.mib(store.cache_mb.as_ref(), "store.cache_mb", CACHE_MB_MAX, "MiB of redb's page cache")? {
                    Some(bytes) => bytes as usize,
                    None => RedbConfig::default().cache_bytes,
                };
            Ok(Backend::Redb { durability, compact_when_quiet, cache_bytes })
        }
        Some(("redis", _)) => {
            if let Some(c) = &store.compact_when_quiet_s {
                return Err(cx.err(
                    Some(c.span()),
                    "store.compact_when_quiet_s",
                    "applies to the redb backend only (a Redis store has no file to compact)",
                ));
            }
            if let Some(c) = &store.cache_mb {
                return Err(cx.err(
                    Some(c.span()),
                    "store.cache_mb",
                    "applies to the redb backend only (a Redis store caches nothing in the host)",
                ));
            }
            if let Some(d) = &store.durability {
                return Err(cx.err(
                    Some(d.span()),
                    "store.durability",
                    "applies to the redb backend only (the Redis backend's durability is the cluster's: \
                     appendfsync and [store.redis] replicas)",
                ));
            }
            let r = store.redis.as_ref().map(|r| r.get_ref());
            let nodes = match r.and_then(|r| r.nodes.as_ref()) {
                Some(n) if n.get_ref().is_empty() => {
                    return Err(cx.err(Some(n.span()), "store.redis.nodes", "names no node (host:port)"));
                }
                Some(n) => n.get_ref().clone(),
                None => match env_list(REDIS_NODES_ENV) {
                    Some(nodes) => nodes,
                    None => {
                        return Err(cx.err(
                            store.redis.as_ref().map(|r| r.span()).or(store.backend.as_ref().map(|b| b.span())),
                            "store.redis.nodes",
                            format!(
                                "is not set and neither is {REDIS_NODES_ENV}: name the cluster's seed nodes \
                                 (nodes = [\"127.0.0.1:7100\"]; scripts/dev-cluster up starts one)"
                            ),
                        ));
                    }
                },
            };
            for (i, n) in nodes.iter().enumerate() {
                let ok =
                    n.rsplit_once(':').is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p > 0));
                if !ok {
                    let span = r.and_then(|r| r.nodes.as_ref()).map(|n| n.span());
                    return Err(cx.err(span, format!("store.redis.nodes[{i}]"), format!("{n:?} is not host:port")));
                }
            }
            let defaults = RedisConfig::default();
            let namespace = match r.and_then(|r| r.namespace.as_ref()) {
                Some(n) if n.get_ref().is_empty() || n.get_ref().contains(['{', '}']) => {
                    return Err(cx.err(Some(n.span()), "store.redis.namespace", "must be non-empty, without braces"));
                }
                Some(n) => n.get_ref().clone(),
                None => defaults.namespace.clone(),
            };
            let count = |field: Option<&toml::Spanned<i64>>, name: &str, min: i64, max: i64, default: u32| match field {
                None => Ok(default),
                Some(v) if (min..=max).contains(v.get_ref()) => Ok(*v.get_ref() as u32),
                Some(v) => Err(cx.err(
                    Some(v.span()),
                    format!("store.redis.{name}"),
                    format!("must be between {min} and {max}"),
                )),
            };
            let buckets = count(r.and_then(|r| r.buckets.as_ref()), "buckets", 1, 4096, defaults.buckets)?;
            let replicas = count(r.and_then(|r| r.replicas.as_ref()), "replicas", 0, 16, defaults.replicas)?;
            let etcd = match r.and_then(|r| r.etcd.as_ref()) {
                Some(e) => {
                    for (i, url) in e.get_ref().iter().enumerate() {
                        if !(url.starts_with("http://") || url.starts_with("https://")) {
                            return Err(cx.err(
                                Some(e.span()),
                                format!("store.redis.etcd[{i}]"),
                                format!("{url:?} is not an http:// URL"),
                            ));
                        }
                    }
                    e.get_ref().clone()
                }
                None => env_list(ETCD_ENV).unwrap_or_default(),
            };
            let oracle_listen = match r.and_then(|r| r.oracle_listen.as_ref()) {
                Some(a) => a.get_ref().parse::<SocketAddr>().map_err(|_| {
                    cx.err(Some(a.span()), "store.redis.oracle_listen", format!("{:?} is not ip:port", a.get_ref()))
                })?,
                None => OracleServiceConfig::default().listen,
            };
            let degraded_writes = r.and_then(|r| r.degraded_writes).unwrap_or(defaults.degraded_writes);
            Ok(Backend::Redis(RedisSettings {
                nodes,
                namespace,
                buckets,
                replicas,
                degraded_writes,
                etcd,
                oracle_listen,
            }))
        }
        Some((other, span)) => {
            Err(cx.err(Some(span), "store.backend", format!("{other:?} is not one of \"redb\", \"redis\"")))
        }
    }
}

/// The deepest value of `table` whose span holds `span`: its field path, its key (`None` for an
/// element of a list) and the value.
fn locate<'a>(
    table: &'a toml::de::DeTable<'a>,
    prefix: &str,
    span: &Range<usize>,
) -> Option<(String, Option<&'a str>, &'a toml::de::DeValue<'a>)> {
    use toml::de::DeValue;
    let holds = |s: Range<usize>| s.start <= span.start && span.end <= s.end;
    for (key, value) in table.iter() {
        let key = key.get_ref().as_ref();
        let path = if prefix.is_empty() { key.to_owned() } else { format!("{prefix}.{key}") };
        match value.get_ref() {
            DeValue::Table(t) => {
                if let Some(found) = locate(t, &path, span) {
                    return Some(found);
                }
            }
            DeValue::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    let path = format!("{path}[{i}]");
                    match item.get_ref() {
                        DeValue::Table(t) => {
                            if let Some(found) = locate(t, &path, span) {
                                return Some(found);
                            }
                        }
                        v if holds(item.span()) => return Some((path, None, v)),
                        _ => {}
                    }
                }
            }
            _ => {}
        }
        if holds(value.span()) {
            return Some((path, Some(key), value.get_ref()));
        }
    }
    None
}

/// What each key of the file holds, in words.
fn expected_type(key: &str) -> Option<&'static str> {
    Some(match key {
        "threads" | "max_attempts" | "timeout_ms" | "memory_mb" | "max_instances" | "max_tables" | "max_memories"
        | "random_seed" | "cache_max_mb" | "cache_mb" => "an integer",
        "params" => "a table",
        "allow_cycle" => "a boolean (true or false)",
        "reads" | "writes" | "columns" => "a list of strings",
        "batch" => "an integer",
        "sink" => "[[sink]] tables",
        "binding" => "[[binding]] tables",
        "store" | "scanner" | "observers" | "http" => "a table",
        "path" | "durability" | "backend" | "namespace" | "oracle_listen" | "dir" | "cache_dir" | "listen"
        | "token_file" | "name" | "wasm" | "table" | "column" | "notify" | "clock" | "kind" | "url" | "target"
        | "timeout" => "a string",
        _ => return None,
    })
}

/// Serde's name of an expected type, in words.
fn serde_expected(expected: &str) -> &str {
    match expected {
        "i64" | "u64" | "i32" | "u32" | "usize" => "an integer",
        "a sequence" => "a list",
        "a map" => "a table",
        other => other,
    }
}

/// A TOML value, in words: `the string "two"`, `the integer 5`, `a list`.
fn describe_value(value: &toml::de::DeValue<'_>) -> String {
    use toml::de::DeValue;
    match value {
        DeValue::String(s) if s.len() > 64 => {
            format!("the string {:?}… ({} bytes)", &s[..s.floor_char_boundary(64)], s.len())
        }
        DeValue::String(s) => format!("the string {s:?}"),
        DeValue::Integer(i) => format!("the integer {}", i.as_str()),
        DeValue::Float(x) => format!("the float {}", x.as_str()),
        DeValue::Boolean(b) => format!("the boolean {b}"),
        DeValue::Datetime(d) => format!("the date-time {d}"),
        DeValue::Array(_) => "a list".to_owned(),
        DeValue::Table(_) => "a table".to_owned(),
    }
}

fn parse_http(cx: &Ctx<'_>, raw: Option<&raw::Http>, rel: &dyn Fn(&str) -> PathBuf) -> Result<HttpConfig, ConfigError> {
    let Some(raw) = raw else { return Ok(HttpConfig::default()) };
    let listen = match &raw.listen {
        None => DEFAULT_LISTEN,
        Some(l) => parse_listen(l.get_ref()).map_err(|m| cx.err(Some(l.span()), "http.listen", m))?,
    };
    let token_file = match &raw.token_file {
        None => None,
        Some(t) => {
            let file = rel(t.get_ref());
            read_token(&file).map_err(|m| cx.err(Some(t.span()), "http.token_file", m))?;
            Some(file)
        }
    };
    if !listen.ip().is_loopback() && token_file.is_none() {
        return Err(cx.err(
            raw.listen.as_ref().map(|l| l.span()),
            "http.listen",
            format!(
                "{listen} is not a loopback address: a token is required when listening on a non-loopback address; set http.token_file"
            ),
        ));
    }
    Ok(HttpConfig { listen, token_file })
}

/// `IP:PORT` (`[v6]:PORT` for IPv6), or `localhost:PORT`.
fn parse_listen(s: &str) -> Result<SocketAddr, String> {
    if let Some(port) = s.strip_prefix("localhost:") {
        let port: u16 = port.parse().map_err(|_| format!("{s:?}: {port:?} is not a port number (0-65535)"))?;
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
    }
    s.parse().map_err(|_| format!("{s:?} is not an address and port such as \"127.0.0.1:7878\" or \"[::1]:7878\""))
}

/// One column is bound either strongly or weakly. (A `writes` rule covering a weak column grants
/// `notify-weak` on it; a `set` there still fails at run time, as the store forbids it.)
fn check_columns(cx: &Ctx<'_>, bindings: &[Binding], spans: &[(Range<usize>, bool)]) -> Result<(), ConfigError> {
    let mut kinds: BTreeMap<(&str, &str), (NotifyKind, usize)> = BTreeMap::new();
    for (i, b) in bindings.iter().enumerate() {
        if let Some((kind, j)) = kinds.insert((&b.table, &b.column), (b.kind, i))
            && kind != b.kind
        {
            return Err(cx.err(
                Some(spans[i].0.clone()),
                format!("binding[{i}].notify"),
                format!("{}/{} is bound as {kind} by binding[{j}] and as {} here", b.table, b.column, b.kind),
            ));
        }
    }
    Ok(())
}

/// A binding that writes (or notifies) a column another binding observes triggers it; a cycle
/// of such triggers is an error unless every binding on it says `allow_cycle = true`.
fn check_cycles(cx: &Ctx<'_>, bindings: &[Binding], spans: &[(Range<usize>, bool)]) -> Result<(), ConfigError> {
    let edges: Vec<Vec<usize>> = bindings
        .iter()
        .map(|a| (0..bindings.len()).filter(|&j| a.access.can_write(&bindings[j].table, &bindings[j].column)).collect())
        .collect();
    // For each binding, a breadth-first search for a path back to itself.
    for (start, (_, allowed)) in spans.iter().enumerate() {
        if *allowed {
            continue;
        }
        let mut parent: Vec<Option<usize>> = vec![None; bindings.len()];
        let mut queue = std::collections::VecDeque::from([start]);
        let mut seen = vec![false; bindings.len()];
        let mut back = None;
        while let Some(v) = queue.pop_front() {
            for &w in &edges[v] {
                if w == start {
                    back = Some(v);
                    break;
                }
                if !seen[w] {
                    seen[w] = true;
                    parent[w] = Some(v);
                    queue.push_back(w);
                }
            }
            if back.is_some() {
                break;
            }
        }
        if let Some(mut v) = back {
            let mut path = vec![start];
            let mut tail = vec![v];
            while let Some(p) = parent[v] {
                tail.push(p);
                v = p;
            }
            tail.retain(|&x| x != start);
            tail.reverse();
            path.extend(tail);
            path.push(start);
            let names: Vec<&str> = path.iter().map(|&i| bindings[i].name.as_str()).collect();
            return Err(cx.err(
                Some(spans[start].0.clone()),
                format!("binding[{start}]"),
                format!(
                    "bindings form a cycle ({}); set allow_cycle = true on each binding of the cycle if the pipeline reaches a fixed point",
                    names.join(" -> ")
                ),
            ));
        }
    }
    Ok(())
}

/// One validated `[[sink]]`: where the changes of some columns of a table are delivered, each
/// change's effect exactly once (`crate::sinks`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sink {
    /// Unique name; also the name of its subscription (its position) in the store.
    pub name: String,
    /// The store table whose changes it delivers.
    pub table: String,
    /// The columns of that table it delivers (at least one, no repeats).
    pub columns: Vec<String>,
    /// Changes per delivered batch, at most (default 500).
    pub batch: usize,
    /// Where to, and how.
    pub kind: SinkKind,
    /// The Wasm component each batch goes through before delivery, if any.
    pub transform: Option<SinkTransformSpec>,
    /// The columns of the changes it delivers: [`Sink::columns`] without a transform, else the
    /// columns the transform writes (`outputs`, by default the same).
    pub outputs: Vec<String>,
}

/// A sink's transform (`transform = "x.wasm"`): a component of the `percolator:sink`
/// `transform` world in observers.dir, run in the observers' sandbox under these limits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SinkTransformSpec {
    /// The component file.
    pub wasm: PathBuf,
    /// Deadline and memory of one batch.
    pub limits: Limits,
    /// `[sink.params]`, as text.
    pub params: Arc<BTreeMap<String, String>>,
}

/// A sink's destination.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SinkKind {
    /// Upserts into a PostgreSQL table, one version column per store column.
    Postgres {
        /// `postgresql://user@host:port/db` (parsed by the `postgres` crate when loaded).
        url: String,
        /// The PostgreSQL table (created if missing, columns added if missing).
        target: String,
        /// The PostgreSQL column of each of [`Sink::columns`], in the same order (`doc:title`
        /// → `doc_title`; its version column adds `_version`, its bytes column `_bytes`).
        target_columns: Vec<String>,
    },
    /// Appends one JSON object per change to a file.
    Jsonl {
        /// The file (relative paths are relative to the configuration's folder).
        path: PathBuf,
    },
    /// POSTs batches of changes as JSON.
    Webhook {
        /// `http://` or `https://` URL.
        url: String,
        /// How long one POST may take before it is retried.
        timeout: Duration,
    },
}

impl SinkKind {
    /// `postgres`, `jsonl` or `webhook`.
    pub fn name(&self) -> &'static str {
        match self {
            SinkKind::Postgres { .. } => "postgres",
            SinkKind::Jsonl { .. } => "jsonl",
            SinkKind::Webhook { .. } => "webhook",
        }
    }

    /// Where it delivers, for status: the PostgreSQL table (never the URL, which may hold a
    /// password), the file, or the webhook's URL without its query.
    pub fn destination(&self) -> String {
        match self {
            SinkKind::Postgres { target, url, .. } => {
                let db = url.parse::<postgres::Config>().ok().and_then(|c| c.get_dbname().map(str::to_owned));
                match db {
                    Some(db) => format!("postgres {db}.{target}"),
                    None => format!("postgres {target}"),
                }
            }
            SinkKind::Jsonl { path } => path.display().to_string(),
            SinkKind::Webhook { url, .. } => url.split('?').next().unwrap_or(url).to_owned(),
        }
    }
}

/// The longest PostgreSQL identifier (NAMEDATALEN - 1), in bytes.
const PG_MAX_IDENT: usize = 63;

/// The PostgreSQL column for store column `column`: lower case, every character other than
/// `[a-z0-9_]` replaced by `_` (`doc:title` → `doc_title`), and `c_` before a leading digit.
pub fn postgres_column(column: &str) -> String {
    let mut out: String = column
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '_' { c.to_ascii_lowercase() } else { '_' })
        .collect();
    if out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert_str(0, "c_");
    }
    out
}

/// `duration`: an integer and a unit, `ms`, `s` or `m` (`"10s"`, `"500ms"`).
fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (n, unit) = t.split_at(split);
    let n: u64 = n.parse().map_err(|_| format!("{text:?} is not a duration such as \"10s\" or \"500ms\""))?;
    let d = match unit {
        "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n * 60),
        _ => return Err(format!("{text:?} is not a duration such as \"10s\" or \"500ms\" (units: ms, s, m)")),
    };
    if d.is_zero() || d > Duration::from_secs(600) {
        return Err(format!("{text:?} must be more than 0 and at most 10m"));
    }
    Ok(d)
}

/// A sink's `transform` (a file name in observers.dir, like a binding's `wasm`), with its
/// `timeout_ms`, `memory_mb` and `[sink.params]`; those three without a transform are refused.
fn parse_sink_transform(
    cx: &Ctx<'_>,
    s: &raw::Sink,
    i: usize,
    observers_dir: &Path,
) -> Result<Option<SinkTransformSpec>, ConfigError> {
    let f = |name: &str| format!("sink[{i}].{name}");
    let Some(t) = &s.transform else {
        let stray = [
            ("timeout_ms", s.timeout_ms.as_ref().map(|v| v.span())),
            ("memory_mb", s.memory_mb.as_ref().map(|v| v.span())),
            ("params", s.params.as_ref().map(|v| v.span())),
        ];
        if let Some((field, Some(span))) = stray.into_iter().find(|(_, span)| span.is_some()) {
            return Err(cx.err(Some(span), f(field), "applies to a transform: the sink has no transform"));
        }
        return Ok(None);
    };
    let name = t.get_ref();
    if Path::new(name).file_name().is_none_or(|n| n != name.as_str()) {
        return Err(cx.err(
            Some(t.span()),
            f("transform"),
            format!("{name:?} must be a file name in observers.dir (only that folder is watched)"),
        ));
    }
    let wasm = observers_dir.join(name);
    if !wasm.is_file() {
        let why = if wasm.is_dir() { "is a folder, not a file" } else { "does not exist" };
        return Err(cx.err(Some(t.span()), f("transform"), format!("{} {why}", wasm.display())));
    }
    let int = |v: &Option<toml::Spanned<i64>>, field: &str, range: std::ops::Range<i64>, default: i64| match v {
        None => Ok(default),
        Some(n) if range.contains(n.get_ref()) => Ok(*n.get_ref()),
        Some(n) => Err(cx.err(
            Some(n.span()),
            f(field),
            format!("{} is not between {} and {}", n.get_ref(), range.start, range.end - 1),
        )),
    };
    let timeout_ms = int(&s.timeout_ms, "timeout_ms", 1..600_001, 5000)? as u64;
    let memory_mb = int(&s.memory_mb, "memory_mb", 1..4097, (Limits::DEFAULT.memory_bytes >> 20) as i64)? as usize;
    let params = match &s.params {
        None => BTreeMap::new(),
        Some(p) => parse_params(p.get_ref()).map_err(|e| cx.err(Some(p.span()), f("params"), e))?,
    };
    let limits =
        Limits { timeout: Duration::from_millis(timeout_ms), memory_bytes: memory_mb << 20, ..Limits::DEFAULT };
    Ok(Some(SinkTransformSpec { wasm, limits, params: Arc::new(params) }))
}

fn parse_sinks(
    cx: &Ctx<'_>,
    raw: &[toml::Spanned<raw::Sink>],
    rel: &dyn Fn(&str) -> PathBuf,
    observers_dir: &Path,
) -> Result<Vec<Sink>, ConfigError> {
    let mut sinks = Vec::new();
    let mut names: HashMap<String, usize> = HashMap::new();
    for (i, s) in raw.iter().enumerate() {
        let whole = s.span();
        let s = s.get_ref();
        let f = |name: &str| format!("sink[{i}].{name}");
        let required = |v: &Option<toml::Spanned<String>>, field: &str, why: &str| {
            v.as_ref()
                .map(|v| (v.get_ref().clone(), v.span()))
                .ok_or_else(|| cx.err(Some(whole.clone()), f(field), format!("is missing{why}")))
        };
        let (name, name_span) = required(&s.name, "name", "")?;
        percolator_store::validate_observer_name(&name).map_err(|_| {
            cx.err(Some(name_span.clone()), f("name"), format!("{name:?} must be 1-64 characters of [A-Za-z0-9_.-]"))
        })?;
        if let Some(first) = names.insert(name.clone(), i) {
            return Err(cx.err(Some(name_span), f("name"), format!("{name:?} is already used by sink[{first}]")));
        }
        let (kind, kind_span) = required(&s.kind, "kind", " (one of \"postgres\", \"jsonl\", \"webhook\")")?;
        if !matches!(kind.as_str(), "postgres" | "jsonl" | "webhook") {
            return Err(cx.err(
                Some(kind_span),
                f("kind"),
                format!("{kind:?} is not one of \"postgres\", \"jsonl\", \"webhook\""),
            ));
        }
        let (table, table_span) = required(&s.table, "table", " (the store table whose changes it delivers)")?;
        percolator_store::validate_table(&table).map_err(|e| cx.err(Some(table_span), f("table"), e.to_string()))?;
        let Some(columns) = &s.columns else {
            return Err(cx.err(
                Some(whole),
                f("columns"),
                "is missing (the store columns it delivers, e.g. [\"doc:title\"])",
            ));
        };
        let columns_span = columns.span();
        let columns = columns.get_ref().clone();
        if columns.is_empty() {
            return Err(cx.err(Some(columns_span), f("columns"), "names no column"));
        }
        for (j, c) in columns.iter().enumerate() {
            percolator_store::validate_column(c)
                .map_err(|e| cx.err(Some(columns_span.clone()), format!("sink[{i}].columns[{j}]"), e.to_string()))?;
            if columns[..j].contains(c) {
                return Err(cx.err(
                    Some(columns_span.clone()),
                    format!("sink[{i}].columns[{j}]"),
                    format!("{c:?} is listed twice"),
                ));
            }
        }
        let batch = match &s.batch {
            None => 500,
            Some(b) if (1..=100_000).contains(b.get_ref()) => *b.get_ref() as usize,
            Some(b) => return Err(cx.err(Some(b.span()), f("batch"), "must be between 1 and 100000")),
        };
        let transform = parse_sink_transform(cx, s, i, observers_dir)?;
        let (outputs, columns_span) = match &s.outputs {
            Some(o) if transform.is_none() => {
                return Err(cx.err(Some(o.span()), f("outputs"), "names what a transform writes: it needs transform"));
            }
            Some(o) => {
                let outputs = o.get_ref().clone();
                if outputs.is_empty() {
                    return Err(cx.err(Some(o.span()), f("outputs"), "names no column"));
                }
                for (j, c) in outputs.iter().enumerate() {
                    percolator_store::validate_column(c)
                        .map_err(|e| cx.err(Some(o.span()), format!("sink[{i}].outputs[{j}]"), e.to_string()))?;
                    if outputs[..j].contains(c) {
                        return Err(cx.err(
                            Some(o.span()),
                            format!("sink[{i}].outputs[{j}]"),
                            format!("{c:?} is listed twice"),
                        ));
                    }
                }
                (outputs, o.span())
            }
            None => (columns.clone(), columns_span),
        };
        // Which fields each kind takes: any other is refused, so a typo is not silently ignored.
        let given: [(&str, Option<Range<usize>>); 4] = [
            ("url", s.url.as_ref().map(|v| v.span())),
            ("target", s.target.as_ref().map(|v| v.span())),
            ("path", s.path.as_ref().map(|v| v.span())),
            ("timeout", s.timeout.as_ref().map(|v| v.span())),
        ];
        let takes: &[&str] = match kind.as_str() {
            "postgres" => &["url", "target"],
            "jsonl" => &["path"],
            _ => &["url", "timeout"],
        };
        for (field, span) in &given {
            if let Some(span) = span
                && !takes.contains(field)
            {
                return Err(cx.err(
                    Some(span.clone()),
                    f(field),
                    format!("does not apply to a {kind} sink (it takes: {})", takes.join(", ")),
                ));
            }
        }
        let kind = match kind.as_str() {
            "postgres" => {
                let (url, url_span) = required(&s.url, "url", " (postgresql://user@host:port/database)")?;
                if !(url.starts_with("postgresql://") || url.starts_with("postgres://")) {
                    return Err(cx.err(Some(url_span), f("url"), format!("{url:?} is not a postgresql:// URL")));
                }
                let parsed = url
                    .parse::<postgres::Config>()
                    .map_err(|e| cx.err(Some(url_span.clone()), f("url"), format!("not a PostgreSQL URL: {e}")))?;
                if parsed.get_hosts().is_empty() {
                    return Err(cx.err(Some(url_span), f("url"), "names no host"));
                }
                let (target, target_span) = required(&s.target, "target", " (the PostgreSQL table to upsert into)")?;
                let plain = !target.is_empty()
                    && target.len() <= PG_MAX_IDENT
                    && target.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
                    && target.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
                if !plain {
                    return Err(cx.err(
                        Some(target_span),
                        f("target"),
                        format!(
                            "{target:?} must be a plain PostgreSQL name: [a-z_][a-z0-9_]*, at most {PG_MAX_IDENT} bytes"
                        ),
                    ));
                }
                let mut target_columns: Vec<String> = Vec::new();
                let listed = if s.outputs.is_some() { "outputs" } else { "columns" };
                for (j, c) in outputs.iter().enumerate() {
                    let pg = postgres_column(c);
                    let field = format!("sink[{i}].{listed}[{j}]");
                    if pg.len() + "_version".len() > PG_MAX_IDENT {
                        return Err(cx.err(
                            Some(columns_span.clone()),
                            field,
                            format!("{c:?} is too long for a PostgreSQL column ({pg}_version must fit in {PG_MAX_IDENT} bytes)"),
                        ));
                    }
                    if pg == "row" || pg.ends_with("_version") || pg.ends_with("_bytes") {
                        return Err(cx.err(
                            Some(columns_span.clone()),
                            field,
                            format!("{c:?} would be the PostgreSQL column {pg:?}, which the sink uses itself"),
                        ));
                    }
                    if let Some(k) = target_columns.iter().position(|t| *t == pg) {
                        return Err(cx.err(
                            Some(columns_span.clone()),
                            field,
                            format!("{c:?} and {:?} are both the PostgreSQL column {pg:?}", outputs[k]),
                        ));
                    }
                    target_columns.push(pg);
                }
                SinkKind::Postgres { url, target, target_columns }
            }
            "jsonl" => {
                let (path, path_span) = required(&s.path, "path", " (the file to append to)")?;
                if path.is_empty() {
                    return Err(cx.err(Some(path_span), f("path"), "is empty"));
                }
                let path = rel(&path);
                if path.is_dir() {
                    return Err(cx.err(Some(path_span), f("path"), format!("{} is a folder", path.display())));
                }
                if let Some(other) =
                    sinks.iter().find(|o: &&Sink| matches!(&o.kind, SinkKind::Jsonl { path: p } if *p == path))
                {
                    return Err(cx.err(
                        Some(path_span),
                        f("path"),
                        format!(
                            "{} is already the file of sink {:?}: two sinks would interleave their lines",
                            path.display(),
                            other.name
                        ),
                    ));
                }
                SinkKind::Jsonl { path }
            }
            _ => {
                let (url, url_span) = required(&s.url, "url", " (http:// or https:// URL)")?;
                let uri = url
                    .parse::<ureq::http::Uri>()
                    .map_err(|e| cx.err(Some(url_span.clone()), f("url"), format!("{url:?} is not a URL: {e}")))?;
                let scheme_ok = matches!(uri.scheme_str(), Some("http" | "https"));
                if !scheme_ok || uri.host().is_none_or(str::is_empty) {
                    return Err(cx.err(
                        Some(url_span),
                        f("url"),
                        format!("{url:?} is not an http:// or https:// URL with a host"),
                    ));
                }
                let timeout = match &s.timeout {
                    None => Duration::from_secs(10),
                    Some(t) => parse_duration(t.get_ref()).map_err(|m| cx.err(Some(t.span()), f("timeout"), m))?,
                };
                SinkKind::Webhook { url, timeout }
            }
        };
        sinks.push(Sink { name, table, columns, batch, kind, transform, outputs });
    }
    Ok(sinks)
}
