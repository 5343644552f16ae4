//! A client's route to a store: a running host's HTTP API ([`Route::Remote`]), or the store
//! file opened in this process when no host serves it ([`Route::Direct`]). Either way a
//! command is the same [`Op`] and answers the same types, so a client prints the same thing.
//! [`connect`] picks the route for a configuration file, even one that does not load (then
//! from its `[store]` and `[http]` alone, so that commands keep working during a bad edit).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use percolator_api::{ApiResult, ErrorKind, Remote};
use percolator_redis::{OracleServiceConfig, RedisConfig};
use percolator_store::{Durability, ObserveError, Observer, Store, StoreConfig, Transaction};

use crate::config::{Backend, Config, DEFAULT_LISTEN, ETCD_ENV, HttpConfig, REDIS_NODES_ENV, RedisSettings, env_list};
use crate::ops::{self, Context, Op};

/// Where a client's commands go.
pub enum Route {
    /// A running host.
    Remote(Remote),
    /// The store file, opened here.
    Direct(Direct),
}

impl Route {
    /// Runs command `E`.
    pub fn call<E: Op>(&self, request: E::Request) -> ApiResult<E::Response> {
        match self {
            Route::Remote(r) => r.call::<E>(&request),
            Route::Direct(d) => ops::call::<E>(&d.cx, request),
        }
    }

    /// The host's base URL, if a host serves the store.
    pub fn url(&self) -> Option<&str> {
        match self {
            Route::Remote(r) => Some(r.base()),
            Route::Direct(_) => None,
        }
    }
}

/// The store file opened in this process (no host runs).
pub struct Direct {
    cx: Context,
}

/// Stands in for a binding's observer when no host runs: registering the configuration's
/// bindings makes writes to observed columns set their notify cells (so the host runs the
/// observers when it starts), and refuses writes to weak-notify columns, as a host would.
/// No scanner runs here, so it is never called.
struct Parked;

impl Observer for Parked {
    fn observe(&self, _: &mut Transaction, _: &percolator_store::Notification) -> Result<(), ObserveError> {
        Err(ObserveError::Failed("no host is running".into()))
    }
}

impl Direct {
    /// Opens the store of `config` with its bindings registered (not run) and its logged
    /// columns logged (a load without a host feeds the change log as a host's would).
    pub fn open(config: &Config, store: Store) -> Result<Direct, String> {
        let observers = config.bindings.iter().map(|b| (b.spec(), Arc::new(Parked) as Arc<dyn Observer>)).collect();
        store.set_observers(observers).map_err(|e| format!("{}: {e}", config.file.display()))?;
        let logged = config.logged_columns();
        if store.change_log() != logged {
            store.set_change_log(logged).map_err(|e| format!("{}: {e}", config.file.display()))?;
        }
        Ok(Direct {
            cx: Context {
                store,
                store_path: Arc::new(config.store_path.clone()),
                store_name: config.backend.describe(&config.store_path).into(),
                host: None,
                config_error: None,
                config: Some(Arc::new(config.clone())),
            },
        })
    }

    /// Opens the store at `path` while its configuration does not load (`config_error` says
    /// why). Its bindings are unknown, so a write could not set the notifications they need:
    /// writes are refused (naming the configuration's problem); reads, `gc`, `wait` and dead
    /// letters work.
    pub fn without_bindings(store: Store, path: PathBuf, store_name: String, config_error: String) -> Direct {
        Direct {
            cx: Context {
                store,
                store_path: Arc::new(path),
                store_name: store_name.into(),
                host: None,
                config_error: Some(config_error.into()),
                config: None,
            },
        }
    }
}

/// What the verbs other than `up` need of the configuration: where the store is and how to
/// reach the host serving it. Taken from the configuration when it loads; else from a lenient
/// reading of `[store]` and `[http]` alone, so that the commands keep working while a bad
/// edit (which a running host refuses to reload) is being fixed.
pub struct Target {
    /// The configuration file.
    pub file: PathBuf,
    /// The store file.
    pub store_path: PathBuf,
    /// Where the cells live.
    pub backend: Backend,
    /// How to reach a host (its token).
    pub http: HttpConfig,
    /// The configuration, or why it does not load.
    pub config: Result<Config, String>,
}

impl Target {
    /// Reads the configuration `file` (leniently when it does not load).
    pub fn find(file: &Path) -> Result<Target, String> {
        match Config::load(file) {
            Ok(c) => Ok(Target {
                file: c.file.clone(),
                store_path: c.store_path.clone(),
                backend: c.backend.clone(),
                http: c.http.clone(),
                config: Ok(c),
            }),
            Err(e) => {
                let e = e.to_string();
                match lenient(file) {
                    Some((store_path, backend, http)) => {
                        tracing::debug!("{e}; using [store] and [http] of the configuration only");
                        Ok(Target { file: file.to_owned(), store_path, backend, http, config: Err(e) })
                    }
                    None => Err(e),
                }
            }
        }
    }

    /// The file a running host writes its base URL to (see [`Config::endpoint_file`]).
    pub fn endpoint_file(&self) -> PathBuf {
        let mut name = self.store_path.as_os_str().to_owned();
        name.push(".endpoint");
        PathBuf::from(name)
    }

    /// `message`, followed by the configuration's problem if it has one.
    pub fn explain(&self, message: String) -> String {
        match &self.config {
            Ok(_) => message,
            Err(e) => format!("{message}\n(and the configuration does not load: {e})"),
        }
    }
}

/// `[store] path` and `durability` and `[http] token_file` of the configuration `file`, read
/// without checking anything else (`None` if it has no store path). A file that is not valid
/// TOML (a bad edit in progress) is read line by line: `key = "value"` lines under the
/// `[store]` and `[http]` headers. Relative paths are relative to the file's folder, as in
/// [`Config::load`].
fn lenient(file: &Path) -> Option<(PathBuf, Backend, HttpConfig)> {
    let src = std::fs::read_to_string(file).ok()?;
    let base = file.parent().map(Path::to_path_buf).unwrap_or_default();
    let rel = |p: &str| if Path::new(p).is_absolute() { PathBuf::from(p) } else { base.join(p) };
    let doc = toml::from_str::<toml::Table>(&src).ok();
    let field = |table: &str, key: &str| -> Option<String> {
        match &doc {
            Some(doc) => doc.get(table)?.as_table()?.get(key)?.as_str().map(str::to_owned),
            None => line_field(&src, table, key),
        }
    };
    let path = field("store", "path").filter(|p| !p.is_empty())?;
    let durability = match field("store", "durability").as_deref() {
        Some("none") => Durability::None,
        _ => Durability::Fsync,
    };
    let backend = match field("store", "backend").as_deref() {
        // The settings in full, or the defaults with the nodes from the environment (the line
        // scan of a file that does not parse reads strings only).
        Some("redis") => {
            let r = doc.as_ref().and_then(|d| d.get("store")?.get("redis")?.as_table().cloned()).unwrap_or_default();
            let defaults = RedisConfig::default();
            let nodes = match r.get("nodes").and_then(|n| n.as_array()) {
                Some(a) => a.iter().filter_map(|n| n.as_str().map(str::to_owned)).collect(),
                None => env_list(REDIS_NODES_ENV)?,
            };
            let int = |k: &str, d: u32| r.get(k).and_then(|v| v.as_integer()).map_or(d, |v| v as u32);
            Backend::Redis(RedisSettings {
                nodes,
                namespace: r
                    .get("namespace")
                    .and_then(|v| v.as_str())
                    .map(str::to_owned)
                    .or_else(|| line_field(&src, "store.redis", "namespace"))
                    .unwrap_or(defaults.namespace),
                buckets: int("buckets", defaults.buckets),
                replicas: int("replicas", defaults.replicas),
                degraded_writes: r.get("degraded_writes").and_then(|v| v.as_bool()).unwrap_or(defaults.degraded_writes),
                etcd: match r.get("etcd").and_then(|n| n.as_array()) {
                    Some(a) => a.iter().filter_map(|n| n.as_str().map(str::to_owned)).collect(),
                    None => env_list(ETCD_ENV).unwrap_or_default(),
                },
                oracle_listen: r
                    .get("oracle_listen")
                    .and_then(|v| v.as_str()?.parse().ok())
                    .unwrap_or(OracleServiceConfig::default().listen),
            })
        }
        _ => {
            // A whole number of seconds (the line scan of a file that does not parse reads
            // strings only: the default then).
            let quiet = doc.as_ref().and_then(|d| d.get("store")?.get("compact_when_quiet_s")?.as_integer());
            let compact_when_quiet = match quiet {
                Some(0) => None,
                Some(s) if s > 0 => Some(std::time::Duration::from_secs(s as u64)),
                _ => percolator_store::RedbConfig::default().compact_when_quiet,
            };
            // MiB, in the range the configuration takes; else the default.
            let cache_bytes = match doc.as_ref().and_then(|d| d.get("store")?.get("cache_mb")?.as_integer()) {
                Some(m) if (1..=crate::config::CACHE_MB_MAX).contains(&m) => (m as usize) << 20,
                _ => percolator_store::RedbConfig::default().cache_bytes,
            };
            Backend::Redb { durability, compact_when_quiet, cache_bytes }
        }
    };
    let token_file = field("http", "token_file").map(|p| rel(&p));
    Some((rel(&path), backend, HttpConfig { listen: DEFAULT_LISTEN, token_file }))
}

/// The string value of `key = "..."` under the header `[table]` of a file that is not valid
/// TOML as a whole (a basic or literal string on one line; `None` if there is no such line).
fn line_field(src: &str, table: &str, key: &str) -> Option<String> {
    let mut current = None;
    for line in src.lines() {
        let line = line.trim();
        if let Some(header) = line.strip_prefix('[') {
            // `[name]` (a comment may follow); anything else ends the table we were in.
            current = header
                .split_once(']')
                .filter(|(_, rest)| rest.trim().is_empty() || rest.trim().starts_with('#'))
                .map(|(name, _)| name.trim());
            continue;
        }
        if current != Some(table) {
            continue;
        }
        let Some((k, v)) = line.split_once('=') else { continue };
        if k.trim() != key {
            continue;
        }
        let v = v.trim();
        let quote = v.chars().next().filter(|q| *q == '"' || *q == '\'')?;
        let inner = &v[1..];
        let end = inner.find(quote)?;
        let value = &inner[..end];
        // Escapes in a basic string are not worth guessing at: give up on them.
        if quote == '"' && value.contains('\\') {
            return None;
        }
        return Some(value.to_owned());
    }
    None
}

/// The token for `--url`: PERCOLATOR_TOKEN, else the configuration's token file if the
/// configuration can be read.
fn url_token(config: &Path) -> Result<Option<String>, String> {
    match Target::find(config) {
        Ok(target) => target.http.token(),
        Err(e) => {
            tracing::debug!("no token from the configuration: {e}");
            HttpConfig::default().token()
        }
    }
}

/// Picks the route to the store of the configuration `config`: the host at `url` if given;
/// else the host named by the endpoint file if it answers; else the store file (created only
/// when `creates`).
pub fn connect(config: &Path, url: Option<&str>, creates: bool) -> Result<Route, String> {
    if let Some(url) = url {
        let remote = Remote::new(url, url_token(config)?);
        remote.health()?;
        return Ok(Route::Remote(remote));
    }
    let target = Target::find(config)?;
    let endpoint = target.endpoint_file();
    let mut answered_at = None;
    if let Ok(text) = std::fs::read_to_string(&endpoint) {
        let url = text.trim();
        let remote = Remote::new(url, target.http.token().map_err(|e| target.explain(e))?);
        match remote.health() {
            // A host answers: it must be the one serving this store (not another host that
            // took the port of a host that died without removing its endpoint file).
            Ok(h) if same_file(Path::new(&h.store), &target.store_path) => return Ok(Route::Remote(remote)),
            Ok(h) => {
                tracing::debug!("the host at {url} serves {}, not this store; using the store file", h.store);
                answered_at = Some(format!("{url} (from {}; a host there serves {})", endpoint.display(), h.store));
            }
            Err(e) if e.kind == ErrorKind::Unavailable => {
                tracing::debug!("{e}; using the store file");
                answered_at = Some(format!("{url} (from {})", endpoint.display()));
            }
            Err(e) => return Err(target.explain(e.message)),
        }
    }
    let nobody = answered_at.unwrap_or_else(|| format!("{} (no such file)", endpoint.display()));
    let path = &target.store_path;
    if !creates && !path.exists() && matches!(target.backend, Backend::Redb { .. }) {
        return Err(target.explain(format!(
            "store {} does not exist and no host answers at {nobody}; start one with `percolator up {}`",
            path.display(),
            target.file.display()
        )));
    }
    let store = target.backend.open(path, StoreConfig::default()).map_err(|e| {
        target.explain(if matches!(e, percolator_store::Error::AlreadyOpen { .. }) {
            format!("store {} is in use by another process and no host answers at {nobody}", path.display())
        } else {
            format!("{}: {e}", target.backend.describe(path))
        })
    })?;
    let direct = match &target.config {
        Ok(config) => Direct::open(config, store)?,
        Err(e) => Direct::without_bindings(store, path.clone(), target.backend.describe(path), e.clone()),
    };
    Ok(Route::Direct(direct))
}

/// What `percolator compact` did to a store file.
pub struct Compacted {
    /// The store file.
    pub path: PathBuf,
    /// The GC pass and the file's sizes.
    pub compaction: percolator_store::Compaction,
}

/// Collects old versions and compacts the redb store file of the configuration `config` (or
/// `store`, when given: then the configuration is not read), offline: refused, with nothing
/// changed, when a host answers at the store's endpoint file or another process holds the file
/// (compaction needs it closed), and for a Redis store (no file; Redis gives memory back by
/// itself). See [`Store::compact`].
pub fn compact(config: &Path, store: Option<&Path>) -> Result<Compacted, String> {
    let (path, target) = match store {
        Some(p) => (p.to_owned(), None),
        None => {
            let t = Target::find(config)?;
            (t.store_path.clone(), Some(t))
        }
    };
    let explain = |m: String| match &target {
        Some(t) => t.explain(m),
        None => m,
    };
    if let Some(t) = &target
        && let Backend::Redis(r) = &t.backend
    {
        return Err(explain(format!(
            "compact works on a redb store file; the store of {} is namespace {:?} on the Redis Cluster, \
             which gives memory back by itself: there is nothing to compact",
            t.file.display(),
            r.namespace
        )));
    }
    let token = match &target {
        Some(t) => t.http.token(),
        None => HttpConfig::default().token(),
    }
    .ok()
    .flatten();
    let closed = "compact needs the store file closed; `percolator gc` collects old versions while a host runs";
    let mut endpoint = path.as_os_str().to_owned();
    endpoint.push(".endpoint");
    if let Ok(text) = std::fs::read_to_string(&endpoint) {
        let url = text.trim();
        let serves = match Remote::new(url, token).health() {
            Ok(h) => same_file(Path::new(&h.store), &path),
            // Something answers there, and it cannot say which store it serves.
            Err(e) => e.kind != ErrorKind::Unavailable,
        };
        if serves {
            return Err(explain(format!("a host serves store {} at {url}: stop it first ({closed})", path.display())));
        }
    }
    match Store::compact(&path) {
        Ok(compaction) => Ok(Compacted { path, compaction }),
        Err(percolator_store::Error::AlreadyOpen { .. }) => {
            Err(explain(format!("store {} is in use by another process: stop it first ({closed})", path.display())))
        }
        Err(percolator_store::Error::NotFound(_)) if path.is_dir() => {
            Err(explain(format!("store {} is a folder, not a store file", path.display())))
        }
        Err(percolator_store::Error::NotFound(_)) => Err(explain(format!("store {} does not exist", path.display()))),
        Err(e) => Err(explain(format!("compacting {}: {e}", path.display()))),
    }
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broken_configuration_still_names_the_store_and_the_token_file() {
        let dir = std::env::temp_dir().join(format!("percolator-lenient-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("p.toml");
        let write = |text: &str| std::fs::write(&file, text).unwrap();
        // The observers folder is missing and a binding is wrong: the configuration does not load.
        write(
            "[store]\npath = \"s.redb\"\ndurability = \"none\"\n[observers]\ndir = \"nowhere\"\n\
             [http]\ntoken_file = \"tok\"\nlisten = \"127.0.0.1:0\"\n[[binding]]\nname = 1\n",
        );
        let t = Target::find(&file).unwrap();
        assert!(t.config.as_ref().is_err_and(|e| e.contains("p.toml")), "{:?}", t.config);
        let redb = |durability| Backend::Redb {
            durability,
            compact_when_quiet: percolator_store::RedbConfig::default().compact_when_quiet,
            cache_bytes: percolator_store::RedbConfig::default().cache_bytes,
        };
        assert_eq!((t.store_path.as_path(), &t.backend), (dir.join("s.redb").as_path(), &redb(Durability::None)));
        assert_eq!(t.http.token_file, Some(dir.join("tok")));
        assert_eq!(t.endpoint_file(), dir.join("s.redb.endpoint"));
        assert!(t.explain("x".into()).starts_with("x\n(and the configuration does not load: "));
        // Compaction when quiet turned off in it: off for the verbs that open the store.
        write("[store]\npath = \"s.redb\"\ncompact_when_quiet_s = 0\n[[binding]]\nname = 1\n");
        let t = Target::find(&file).unwrap();
        assert_eq!(
            t.backend,
            Backend::Redb {
                durability: Durability::Fsync,
                compact_when_quiet: None,
                cache_bytes: percolator_store::RedbConfig::default().cache_bytes
            }
        );
        // A TOML syntax error elsewhere (a bad edit in progress): the store is still found.
        write(
            "[store]\npath = \"s.redb\" # the store\n[http]\ntoken_file = 'tok'\n[[binding]]\nname = \"x\nwasm = 3\n",
        );
        let t = Target::find(&file).unwrap();
        assert!(t.config.as_ref().is_err_and(|e| e.contains("p.toml")), "{:?}", t.config);
        assert_eq!((t.store_path.as_path(), &t.backend), (dir.join("s.redb").as_path(), &redb(Durability::Fsync)));
        assert_eq!(t.http.token_file, Some(dir.join("tok")));
        // A Redis store in a configuration that does not load: its namespace and nodes are found.
        write(
            "[store]\npath = \"s.redb\"\nbackend = \"redis\"\n[store.redis]\nnamespace = \"ns\"\n\
             nodes = [\"127.0.0.1:7100\", \"127.0.0.1:7101\"]\n[observers]\ndir = \"nowhere\"\n",
        );
        let t = Target::find(&file).unwrap();
        assert!(t.config.is_err());
        let Backend::Redis(r) = &t.backend else { panic!("{:?}", t.backend) };
        assert_eq!((r.namespace.as_str(), r.nodes.len()), ("ns", 2));
        // A broken [store] header, or no store path: the configuration's own error.
        for text in ["[store\npath = \"s.redb\"\n", "[observers]\ndir = \"o\"\n", "[store]\npath = 3\n"] {
            write(text);
            let e = Target::find(&file).err().unwrap();
            assert_eq!(e, Config::load(&file).unwrap_err().to_string());
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
