//! Loading and reloading a pipeline whose component file is truncated or corrupt: one clear
//! error naming the file, the previous version keeps serving, hot reload stays alive, and a
//! failed first load says that nothing could be loaded (there is no previous version).

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use percolator_runtime::Runtime;
use percolator_server::config::Config;
use percolator_server::pipeline::Pipeline;
use percolator_server::reload;
use percolator_store::{Durability, RedbConfig, Store, StoreConfig};

#[path = "../../tests/common/mod.rs"]
mod common;

use common::guest;

const QUIET: Duration = Duration::from_secs(60);

fn binding(wasm: &str) -> String {
    format!(
        "\n[[binding]]\nname = \"main\"\nwasm = \"{wasm}\"\ntable = \"docs\"\ncolumn = \"raw:text\"\nwrites = [\"docs/derived:*\"]\n"
    )
}

/// The first half of a guest: a build cut short, a copy interrupted (it made wit-component
/// panic, which killed the reload thread, or `up` at start-up).
fn truncated(name: &str) -> Vec<u8> {
    let bytes = std::fs::read(guest(name)).unwrap();
    bytes[..bytes.len() / 2].to_vec()
}

/// What the pipeline logs (at info and above) while `f` runs on this thread.
fn logged<T>(f: impl FnOnce() -> T) -> (T, String) {
    #[derive(Clone, Default)]
    struct Logs(Arc<Mutex<Vec<u8>>>);
    impl Write for Logs {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Logs {
        type Writer = Logs;
        fn make_writer(&'a self) -> Logs {
            self.clone()
        }
    }
    let logs = Logs::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(logs.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .finish();
    let out = tracing::subscriber::with_default(subscriber, f);
    let text = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    (out, text)
}

/// A store and an empty pipeline in a fresh temp dir whose observers folder holds `main.wasm`
/// with `bytes`.
fn setup(name: &str, bytes: &[u8]) -> (std::path::PathBuf, Arc<Pipeline>, Config) {
    let dir = std::env::temp_dir().join(format!("percolator-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("observers")).unwrap();
    std::fs::write(dir.join("observers/main.wasm"), bytes).unwrap();
    std::fs::write(
        dir.join("pipeline.toml"),
        format!(
            "[store]\npath = \"store.redb\"\ndurability = \"none\"\n[observers]\ndir = \"observers\"\n{}",
            binding("main.wasm")
        ),
    )
    .unwrap();
    let config = Config::load(&dir.join("pipeline.toml")).unwrap();
    let store = Store::open(
        &config.store_path,
        StoreConfig::default(),
        RedbConfig { durability: Durability::None, ..RedbConfig::default() },
    )
    .unwrap();
    let runtime = Runtime::new(Some(config.cache_dir.clone())).unwrap();
    (dir, Arc::new(Pipeline::new(store, runtime)), config)
}

fn wait_for(what: &str, pipeline: &Pipeline, done: impl Fn(&percolator_server::pipeline::Status) -> bool) {
    let deadline = Instant::now() + QUIET;
    loop {
        let status = pipeline.status();
        if done(&status) {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: {status:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_failed_first_load_says_nothing_could_be_loaded_and_a_failed_reload_keeps_the_old_version() {
    let (dir, pipeline, config) = setup("first-load", &truncated("counter"));
    let file = dir.join("observers/main.wasm");
    let (result, logs) = logged(|| pipeline.apply(&config));
    let e = result.unwrap_err();
    assert!(
        e.starts_with(&format!(
            "the pipeline could not be loaded: binding main: loading observer {}: ",
            file.display()
        )),
        "{e}"
    );
    assert!(e.contains("truncated or corrupt"), "{e}");
    assert!(!e.contains('\n'), "one line: {e}");
    assert!(!logs.contains("previous version"), "there is no previous version: {logs}");
    assert_eq!(pipeline.status().generation, 0);

    // Loaded, then the file is cut short again: now a previous version does keep serving.
    std::fs::copy(guest("counter"), &file).unwrap();
    pipeline.apply(&config).unwrap();
    std::fs::write(&file, truncated("counter")).unwrap();
    let (result, logs) = logged(|| pipeline.apply(&config));
    let e = result.unwrap_err();
    assert!(e.starts_with(&format!("binding main: loading observer {}: ", file.display())), "{e}");
    assert!(logs.contains("reload rejected, previous version keeps serving: binding main: loading observer"), "{logs}");
    assert_eq!(logs.lines().count(), 1, "one error: {logs}");
    let status = pipeline.status();
    assert_eq!(status.generation, 1);
    assert_eq!(status.last_error.as_deref(), Some(e.as_str()));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_truncated_component_is_rejected_on_hot_reload_and_the_watcher_lives_on() {
    let (dir, pipeline, config) = setup("truncated-reload", &std::fs::read(guest("counter")).unwrap());
    pipeline.apply(&config).unwrap();
    let first = pipeline.status().bindings[0].source_hash.clone();
    let _watch =
        reload::watch(pipeline.clone(), &dir.join("pipeline.toml"), &dir.join("observers"), Duration::from_millis(100))
            .unwrap();
    let file = dir.join("observers/main.wasm");
    // Written in place, as a build or a copy cut short would leave it.
    std::fs::write(&file, truncated("counter")).unwrap();
    wait_for("the truncated file is reported", &pipeline, |s| s.last_error.is_some());
    let status = pipeline.status();
    let e = status.last_error.unwrap();
    assert!(e.contains(&format!("loading observer {}: ", file.display())) && e.contains("truncated or corrupt"), "{e}");
    assert!(!e.contains("panic"), "caught before any toolchain panic: {e}");
    assert_eq!(status.generation, 1, "the old version keeps serving");
    assert_eq!(status.bindings[0].source_hash, first);

    // Hot reload is alive: a good (changed) version is picked up.
    let tmp = dir.join("main.wasm.tmp");
    std::fs::copy(guest("counter-v2"), &tmp).unwrap();
    std::fs::rename(&tmp, &file).unwrap();
    wait_for("the good version is loaded", &pipeline, |s| s.generation == 2);
    let status = pipeline.status();
    assert_eq!(status.last_error, None);
    assert_ne!(status.bindings[0].source_hash, first);
    drop(_watch);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A reload is pending from before it notes its inputs to after it applied them: in between,
/// the inputs it noted match the files and no apply holds the pipeline yet, which `wait` took
/// for "no reload coming" and returned before the new version was in (`host/tests/cli.rs`'s
/// `wait_waits_for_a_pending_reload` failed so on a loaded machine).
#[test]
fn a_reload_is_pending_from_before_it_notes_its_inputs_until_it_ends() {
    let (dir, pipeline, config) = setup("reload-pending", b"not read");
    pipeline.note_inputs(&config.file, &config.observers_dir);
    assert!(!pipeline.reload_pending(), "nothing changed since the inputs were noted");
    {
        let _under_way = pipeline.begin_reload();
        pipeline.note_inputs(&config.file, &config.observers_dir);
        assert!(pipeline.reload_pending(), "a reload that read its inputs and has not applied them yet");
    }
    assert!(!pipeline.reload_pending(), "the reload ended");
    let _ = std::fs::remove_dir_all(dir);
}
