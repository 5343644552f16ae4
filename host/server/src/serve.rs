//! `percolator up`: open the store, load the pipeline, run the scanner, hot-reload, and serve
//! the HTTP API until the shutdown signal; the base URL is written to the endpoint file
//! (`Config::endpoint_file`) while serving.

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use percolator_store::{ScannerConfig, Store, StoreConfig};

use percolator_runtime::Runtime;

use crate::config::Config;
use crate::http::{self, AppState};
use crate::ops::{Context, HostContext};
use crate::pipeline::Pipeline;
use crate::reload;
use crate::sampler::{Pending, Sampler};
use crate::sinks::Sinks;

/// The sample ring's backlog count takes at most one part in this many of a thread's time
/// (a count of a large backlog is a scan of up to `ops::BACKLOG_CAP` notify cells).
const BACKLOG_COUNT_SHARE: u32 = 20;

/// In-flight requests get this long to finish after the shutdown signal.
const DRAIN: Duration = Duration::from_secs(5);

/// The base URL clients use for a listener bound to `addr` (an unspecified address is reached
/// through loopback).
pub fn base_url(addr: SocketAddr) -> String {
    let ip = match addr.ip() {
        IpAddr::V4(v4) if v4.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(v6) if v6.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    format!("http://{}", SocketAddr::new(ip, addr.port()))
}

/// Serves the pipeline of the configuration at `config_path` until `shutdown` completes, then
/// stops serving (running `wait`s end with "the host is shutting down"), stops the scanner,
/// removes the endpoint file, saves the bindings' run counts and the store's counters, and
/// closes the store once every request has finished with it, so that its last commits are
/// durable whatever `store.durability` says. With durability `fsync` the store is crash-safe:
/// a host killed without the signal loses nothing but the counts since their last save (every
/// 10 s; its endpoint file is then stale, and clients notice that no host answers); with
/// `none` it loses about the last second of commits (redb makes one durable a second after the
/// last durable one, also when the store goes quiet).
pub fn up(config_path: &Path, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<(), String> {
    let config = Config::load(config_path).map_err(|e| e.to_string())?;
    let token = config.http.token()?;
    create_store_dir(&config)?;
    let store = config.backend.open(&config.store_path, StoreConfig::default()).map_err(|e| {
        if matches!(e, percolator_store::Error::AlreadyOpen { .. }) {
            format!(
                "store {} is in use by another process (is a host already serving it? see {})",
                config.store_path.display(),
                config.endpoint_file().display()
            )
        } else {
            format!("{}: {e}", config.backend.describe(&config.store_path))
        }
    })?;
    let runtime = Runtime::new(Some(config.cache_dir.clone())).map_err(|e| format!("{e:#}"))?;
    // The cache's old components go now (and after each compile that adds one).
    runtime.set_cache_limit(config.cache_max_bytes);
    let pipeline = Arc::new(Pipeline::new(store.clone(), runtime));
    // The sinks run with the pipeline and are reloaded with it; refused batches are kept
    // beside the store (`<store>.sinks/<sink>/`).
    let sinks = Arc::new(Sinks::new(Arc::new(store.clone()), config.sinks_dir()));
    pipeline.attach_sinks(sinks.clone());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("percolator-http")
        .enable_all()
        .build()
        .map_err(|e| format!("starting the HTTP runtime: {e}"))?;
    let result = rt.block_on(serve(config, store.clone(), pipeline.clone(), token, shutdown));
    // Dropping the runtime drops its tasks (requests cut off after the drain) and waits for the
    // blocking ones still running: every request's clone of the store is gone after it. No
    // blocking call waits long (`wait` polls asynchronously), so this ends soon.
    drop(rt);
    // Each sink finishes the delivery it is in; its position stays where the last
    // acknowledged batch moved it.
    sinks.stop();
    // The scanner has stopped: no observer runs any more, so these are the final counts.
    // (Nothing ran if the first load failed.)
    if let Err(e) = if result.is_ok() { pipeline.persist_counts() } else { Ok(()) } {
        tracing::warn!("stopping: {e} (counts since the last save are lost)");
    }
    // The last clones: closing the store checkpoints what redb's memtable holds and removes
    // the redo log.
    drop(pipeline);
    drop(store);
    result
}

async fn serve(
    config: Config,
    store: Store,
    pipeline: Arc<Pipeline>,
    token: Option<String>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), String> {
    // Listen for the signal from the start.
    let (signalled, mut on_signal) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        shutdown.await;
        let _ = signalled.send(());
    });
    let listen = config.http.listen;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| format!("{}: http.listen: cannot listen on {listen}: {e}", config.file.display()))?;
    let addr = listener.local_addr().map_err(|e| format!("listening on {listen}: {e}"))?;
    let url = base_url(addr);
    let sampler = Arc::new(Sampler::new());
    let (stop_serving, mut stopped) = tokio::sync::watch::channel(false);
    let host = Arc::new(HostContext {
        pipeline: pipeline.clone(),
        sampler: sampler.clone(),
        url: url.clone(),
        started_at: SystemTime::now(),
        shutdown: stopped.clone(),
    });
    let cx = Context {
        store: store.clone(),
        store_path: Arc::new(config.store_path.clone()),
        store_name: config.backend.describe(&config.store_path).into(),
        host: Some(host),
        config_error: None,
        config: None,
    };
    let app = http::router(AppState::new(cx, token.as_deref(), addr));
    let server = tokio::spawn(
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stopped.changed().await;
            })
            .into_future(),
    );

    // The API and the endpoint file first: while the first load compiles the components
    // (a large one takes a while), clients reach the host, `status` says what it compiles
    // and `wait` waits for it.
    let endpoint = config.endpoint_file();
    if let Err(e) = write_endpoint(&endpoint, &url) {
        let _ = stop_serving.send(true);
        return Err(e);
    }
    let stop_early = |e: Option<String>| {
        if let Err(e) = std::fs::remove_file(&endpoint) {
            tracing::warn!("removing {}: {e}", endpoint.display());
        }
        let _ = stop_serving.send(true);
        e.map_or(Ok(()), Err)
    };
    // The watcher from before the first load: an edit made while it compiles is reloaded
    // after it (reloads wait for the load). What it compares with: the inputs as the load
    // read them (`wait` waits while they differ).
    pipeline.note_inputs(&config.file, &config.observers_dir);
    let reloader =
        match reload::watch(pipeline.clone(), &config.file, &config.observers_dir, Duration::from_millis(200)) {
            Ok(r) => r,
            Err(e) => return stop_early(Some(format!("watching for changes: {e}"))),
        };
    let n = config.bindings.len();
    tracing::info!(%url, "listening; loading the pipeline ({n} binding{})", if n == 1 { "" } else { "s" });
    let load = {
        let (pipeline, config) = (pipeline.clone(), config.clone());
        tokio::task::spawn_blocking(move || pipeline.apply(&config))
    };
    tokio::select! {
        loaded = load => match loaded {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return stop_early(Some(e)),
            Err(e) => return stop_early(Some(format!("loading the pipeline: {e}"))),
        },
        _ = &mut on_signal => {
            // The component being compiled finishes in the background (it cannot be cut off);
            // nothing runs it.
            tracing::info!("shutting down before the pipeline was loaded");
            return stop_early(None);
        }
    }

    let scanner = store.start_scanner(ScannerConfig {
        threads: config.scanner_threads,
        workers: config.observer_workers,
        ..ScannerConfig::default()
    });
    // Old versions are collected as the safepoint moves (redb reuses the pages they held).
    let gc = config.gc_interval.map(|every| store.start_gc(every));
    let sampling = {
        let (store, sampler, pipeline) = (store.clone(), sampler.clone(), pipeline.clone());
        let trimmer = Arc::new(std::sync::Mutex::new(crate::trim::Trimmer::default()));
        // The status line every this many samples (0: never).
        let log_every = config.status_log_interval.map_or(0, |d| d.as_secs().max(1));
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            // A slow backlog count delays the next sample rather than bunching them up.
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut logged = None;
            // When the backlog was last counted, and how long that took.
            let mut counted_at = None;
            for n in 1u64.. {
                tick.tick().await;
                let m = store.metrics();
                // The backlog, counted as `status` counts it (a scan, on a blocking thread),
                // but at most a twentieth of the time: after a count that took longer than
                // 50 ms, the next waits 20 times as long (the samples between have none).
                let pending = if counted_at.is_none_or(|(at, took): (tokio::time::Instant, Duration)| {
                    at.elapsed() >= took.saturating_mul(BACKLOG_COUNT_SHARE)
                }) {
                    let counting = store.clone();
                    let started = tokio::time::Instant::now();
                    let counted = tokio::task::spawn_blocking(move || crate::ops::backlog(&counting)).await;
                    counted_at = Some((started, started.elapsed()));
                    match counted {
                        Ok(Ok(b)) => Some(Pending { count: b.total, capped: b.capped }),
                        Ok(Err(e)) => {
                            tracing::debug!("counting the backlog for the sample ring: {e}");
                            None
                        }
                        Err(e) => {
                            tracing::debug!("counting the backlog for the sample ring: {e}");
                            None
                        }
                    }
                } else {
                    None
                };
                sampler.sample(m, pending);
                // A sample of the oracle's clock at least once a second (freshness of other
                // hosts' changes); with a shared oracle, a request to it.
                let clock = store.clone();
                tokio::task::spawn_blocking(move || {
                    if let Err(e) = clock.sample_clock() {
                        tracing::debug!("sampling the oracle's clock: {e}");
                    }
                });
                // The status line, unless nothing changed since the last one (an idle host is
                // quiet).
                if log_every > 0 && n % log_every == 0 {
                    let listing = store.clone();
                    let dead_now = tokio::task::spawn_blocking(move || listing.dead_letters().map(|d| d.len() as u64))
                        .await
                        .ok()
                        .and_then(Result::ok);
                    let line = StatusLine::new(&m, dead_now);
                    if logged.as_ref() != Some(&line) {
                        line.log();
                        logged = Some(line);
                    }
                }
                // Every 10 s, the store's totals and the bindings' run counts are saved (only
                // those that moved), so that a host killed without a clean stop loses at most
                // 10 s of them.
                if n % 10 == 0 {
                    let (store, pipeline, trimmer) = (store.clone(), pipeline.clone(), trimmer.clone());
                    let saved = tokio::task::spawn_blocking(move || {
                        if let Err(e) = store.persist_metrics() {
                            tracing::warn!("saving the store's counters: {e}");
                        }
                        if let Err(e) = pipeline.persist_counts() {
                            tracing::warn!("{e}");
                        }
                        // And the change log trimmed (every host does it; it is idempotent).
                        let mut trimmer = trimmer.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                        match trimmer.tick(&store, pipeline.changes_keep()) {
                            Ok(0) => {}
                            Ok(n) => tracing::debug!(rows = n, "change log trimmed"),
                            Err(e) => tracing::warn!("trimming the change log: {e}"),
                        }
                    });
                    if let Err(e) = saved.await {
                        tracing::warn!("saving the counters: {e}");
                    }
                }
            }
        })
    };

    let n = config.bindings.len();
    println!(
        "percolator: serving {url} (store {}, {n} binding{})",
        config.backend.describe(&config.store_path),
        if n == 1 { "" } else { "s" }
    );
    tracing::info!(
        %url,
        store = %config.backend.describe(&config.store_path),
        observers = %config.observers_dir.display(),
        endpoint = %endpoint.display(),
        "serving"
    );

    // (An error: the signal handler is gone, which is a reason to stop too.)
    let _ = on_signal.await;
    tracing::info!("shutting down");
    if let Err(e) = std::fs::remove_file(&endpoint) {
        tracing::warn!("removing {}: {e}", endpoint.display());
    }
    let _ = stop_serving.send(true);
    match tokio::time::timeout(DRAIN, server).await {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(e))) => tracing::warn!("HTTP server: {e}"),
        Ok(Err(e)) => tracing::warn!("HTTP server task: {e}"),
        Err(_) => tracing::warn!("requests still running after {} s were cut off", DRAIN.as_secs()),
    }
    sampling.abort();
    drop(reloader);
    tokio::task::spawn_blocking(move || {
        drop(gc);
        scanner.stop()
    })
    .await
    .map_err(|e| format!("stopping the scanner: {e}"))?;
    tracing::info!("stopped");
    Ok(())
}

/// What the host's periodic status line says (`[log] status_interval_s`): the store's
/// counters, totals over its life, and `dead_letters_now`, the dead letters waiting for a
/// retry now (what `status` counts), beside `dead_lettered_total`, the notifications ever
/// dead-lettered (the counter `dead_letters`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct StatusLine {
    commits: u64,
    observer_runs: u64,
    observer_failures: u64,
    conflicts: u64,
    /// None if listing them failed.
    dead_letters_now: Option<u64>,
    dead_lettered_total: u64,
}

impl StatusLine {
    fn new(m: &percolator_store::Metrics, dead_letters_now: Option<u64>) -> StatusLine {
        StatusLine {
            commits: m.commits,
            observer_runs: m.observer_runs,
            observer_failures: m.observer_failures,
            conflicts: m.conflicts,
            dead_letters_now,
            dead_lettered_total: m.dead_letters,
        }
    }

    /// Logs it at info.
    fn log(&self) {
        tracing::info!(
            commits = self.commits,
            observer_runs = self.observer_runs,
            observer_failures = self.observer_failures,
            conflicts = self.conflicts,
            dead_letters_now = self.dead_letters_now,
            dead_lettered_total = self.dead_lettered_total,
            "status"
        );
    }
}

/// Completes on SIGINT or SIGTERM (must be polled inside the tokio runtime).
pub async fn signals() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) {
            (Ok(mut int), Ok(mut term)) => {
                tokio::select! {
                    _ = int.recv() => {}
                    _ = term.recv() => {}
                }
            }
            (Err(e), _) | (_, Err(e)) => {
                tracing::error!("cannot listen for signals ({e}); stop the host with SIGKILL");
                std::future::pending::<()>().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Creates the folder of the store file (`up` creates the store; the other verbs only open an
/// existing one and create nothing).
fn create_store_dir(config: &Config) -> Result<(), String> {
    let Some(dir) = config.store_path.parent().filter(|d| !d.as_os_str().is_empty()) else { return Ok(()) };
    std::fs::create_dir_all(dir).map_err(|e| {
        format!(
            "{}: store.path: cannot create the folder {} of the store {}: {e}",
            config.file.display(),
            dir.display(),
            config.store_path.display()
        )
    })
}

/// Writes the endpoint file atomically (a reader sees the old content or the new, whole).
fn write_endpoint(path: &Path, url: &str) -> Result<(), String> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp-{}", std::process::id()));
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, format!("{url}\n"))
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| format!("writing the endpoint file {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Dir(PathBuf);

    impl Dir {
        fn new(name: &str, store_path: &str) -> Dir {
            let p = std::env::temp_dir().join(format!("percolator-serve-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(p.join("observers")).unwrap();
            let body = format!(
                "[store]\npath = \"{store_path}\"\n[observers]\ndir = \"observers\"\n[http]\nlisten = \"127.0.0.1:0\"\n"
            );
            std::fs::write(p.join("pipeline.toml"), body).unwrap();
            Dir(p)
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn up_creates_the_folder_of_the_store() {
        let dir = Dir::new("mkdir", "data/nested/store.redb");
        up(&dir.0.join("pipeline.toml"), async {}).unwrap();
        assert!(dir.0.join("data/nested/store.redb").is_file(), "the store was created in its new folder");
    }

    #[test]
    fn a_store_folder_that_cannot_be_created_is_named() {
        let dir = Dir::new("mkdir-fails", "blocker/store.redb");
        std::fs::write(dir.0.join("blocker"), b"a file, not a folder").unwrap();
        let e = up(&dir.0.join("pipeline.toml"), async {}).unwrap_err();
        assert!(e.contains("pipeline.toml: store.path: cannot create the folder"), "{e}");
        assert!(e.contains("blocker"), "{e}");
    }
}
