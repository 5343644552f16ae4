//! Hot reload: watch the configuration file and the observers folder; after a quiet period,
//! validate and compile everything, then swap atomically ([`Pipeline::apply`]). The compiled
//! cache and the store are never watched.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{RecvTimeoutError, channel};
use std::thread::JoinHandle;
use std::time::Duration;

use notify::{RecursiveMode, Watcher};

use crate::config::Config;
use crate::pipeline::Pipeline;

/// Watches for changes until dropped.
pub struct Reloader {
    _watcher: notify::RecommendedWatcher,
    thread: Option<JoinHandle<()>>,
    stop: std::sync::mpsc::Sender<()>,
}

impl Drop for Reloader {
    fn drop(&mut self) {
        let _ = self.stop.send(());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Starts watching `config_file` and `observers_dir`; changes are applied to `pipeline` after
/// `debounce` without further events.
pub fn watch(
    pipeline: Arc<Pipeline>,
    config_file: &Path,
    observers_dir: &Path,
    debounce: Duration,
) -> notify::Result<Reloader> {
    let config_file = config_file.canonicalize().unwrap_or_else(|_| config_file.to_owned());
    let observers_dir = observers_dir.canonicalize().unwrap_or_else(|_| observers_dir.to_owned());
    let (tx, rx) = channel::<PathBuf>();
    let (cfg, obs) = (config_file.clone(), observers_dir.clone());
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        let Ok(event) = event else { return };
        if matches!(event.kind, notify::EventKind::Access(_)) {
            return;
        }
        for path in event.paths {
            let relevant =
                path == cfg || (path.parent() == Some(obs.as_path()) && path.extension().is_some_and(|e| e == "wasm"));
            if relevant {
                let _ = tx.send(path);
            }
        }
    })?;
    let config_dir = config_file.parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("."));
    watcher.watch(&config_dir, RecursiveMode::NonRecursive)?;
    if observers_dir != config_dir {
        watcher.watch(&observers_dir, RecursiveMode::NonRecursive)?;
    }
    // What a reload may not change (the running store, scanner and watched folder).
    let initial = Config::load(&config_file).map_err(|e| notify::Error::generic(&e.to_string()))?;
    let (stop, stopped) = channel::<()>();
    let thread = std::thread::Builder::new()
        .name("percolator-reload".into())
        .spawn(move || {
            loop {
                // Wait for a first change (or stop).
                let first = loop {
                    if stopped.try_recv().is_ok() {
                        return;
                    }
                    match rx.recv_timeout(Duration::from_millis(100)) {
                        Ok(p) => break p,
                        Err(RecvTimeoutError::Timeout) => continue,
                        Err(RecvTimeoutError::Disconnected) => return,
                    }
                };
                // Debounce: a build writes a file in several steps.
                let mut changed = vec![first];
                loop {
                    match rx.recv_timeout(debounce) {
                        Ok(p) => changed.push(p),
                        Err(RecvTimeoutError::Timeout) => break,
                        Err(RecvTimeoutError::Disconnected) => return,
                    }
                }
                changed.sort();
                changed.dedup();
                // An edit made during the host's first load is applied after it (never before:
                // the older configuration would then win).
                while !pipeline.has_loaded() {
                    if !matches!(stopped.try_recv(), Err(std::sync::mpsc::TryRecvError::Empty)) {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                tracing::info!(?changed, "reloading");
                // Whatever a reload runs into, the watcher lives on: a panic (the runtime
                // already turns one in the toolchain into an error) is reported as the
                // rejected reload's error, and the next change is picked up as usual.
                let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    reload(&pipeline, &config_file, &initial)
                }));
                if let Err(payload) = outcome {
                    let what = payload
                        .downcast_ref::<&str>()
                        .map(|s| (*s).to_owned())
                        .or_else(|| payload.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "no message".to_owned());
                    let msg =
                        format!("reload of {changed:?} failed with a panic ({what}); previous version keeps serving");
                    tracing::error!("{msg}");
                    pipeline.record_error(msg);
                }
            }
        })
        .expect("spawning the reload thread");
    Ok(Reloader { _watcher: watcher, thread: Some(thread), stop })
}

/// One reload: read the configuration, check what may not change, apply.
fn reload(pipeline: &Pipeline, config_file: &Path, initial: &Config) {
    // Under way from before the inputs are noted to after they are applied: `wait` must not
    // find the inputs unchanged and no reload running in between.
    let _under_way = pipeline.begin_reload();
    pipeline.note_inputs(config_file, &initial.observers_dir);
    match Config::load(config_file) {
        Ok(config) if !config.same_host_settings(initial) => {
            let msg = format!(
                "{}: a reload cannot change {}: restart the host to apply it; reload rejected, previous version keeps \
                 serving",
                config_file.display(),
                initial.restart_changes(&config).join(", ")
            );
            tracing::error!("{msg}");
            pipeline.record_error(msg);
        }
        Ok(config) => {
            let _ = pipeline.apply(&config);
        }
        Err(e) => {
            tracing::error!("reload rejected, previous version keeps serving: {e}");
            pipeline.record_error(e.to_string());
        }
    }
}
