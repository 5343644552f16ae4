//! End-to-end: real guest components (built by `scripts/build-guests` into `target/guests`)
//! running on a host over a redb store in a temp dir. Pipelines reach their fixed point, hostile
//! guests are contained, hot reload swaps observers under load without losing or duplicating a
//! change, and a binding's run counts continue across a restart.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use percolator_runtime::Runtime;
use percolator_server::config::Config;
use percolator_server::reload;
use percolator_store::Store;

#[path = "../../tests/common/mod.rs"]
mod common;

use common::{Host, guest};

/// A host with 2 scanner threads (see [`common::start`]).
fn start(name: &str, guests: &[(&str, &str)], bindings: &str) -> Host {
    common::start(&format!("host-{name}"), guests, bindings, 2)
}

fn binding(name: &str, wasm: &str, column: &str, extra: &str) -> String {
    format!("\n[[binding]]\nname = \"{name}\"\nwasm = \"{wasm}\"\ntable = \"docs\"\ncolumn = \"{column}\"\n{extra}")
}

const QUIET: Duration = Duration::from_secs(60);

fn count(store: &Store, row: &str) -> u64 {
    store
        .begin()
        .unwrap()
        .get("docs", row, "derived:count")
        .unwrap()
        .map(|v| u64::from_be_bytes(v.try_into().unwrap()))
        .unwrap_or(0)
}

#[test]
fn pipeline_of_components_reaches_its_fixed_point() {
    let h = start(
        "e2e",
        &[("uppercase.wasm", "uppercase"), ("counter.wasm", "counter")],
        &(binding("upper", "uppercase.wasm", "raw:text", "writes = [\"docs/derived:upper\"]\n")
            + &binding("count", "counter.wasm", "raw:text", "writes = [\"docs/derived:count\"]\n")),
    );
    for i in 0..20 {
        h.store.run(|t| t.set("docs", format!("d{i:02}"), "raw:text", format!("hello {i}"))).unwrap();
    }
    assert!(h.store.wait_quiescent(QUIET).unwrap(), "quiescent");
    let t = h.store.begin().unwrap();
    for i in 0..20 {
        let row = format!("d{i:02}");
        assert_eq!(t.get("docs", &row, "derived:upper").unwrap(), Some(format!("HELLO {i}").into_bytes()));
    }
    drop(t);
    for i in 0..20 {
        assert_eq!(count(&h.store, &format!("d{i:02}")), 1, "one committed run per change");
    }
    // Re-crawl a few: one more run each.
    for i in 0..5 {
        h.store.run(|t| t.set("docs", format!("d{i:02}"), "raw:text", format!("bye {i}"))).unwrap();
    }
    assert!(h.store.wait_quiescent(QUIET).unwrap());
    for i in 0..20 {
        assert_eq!(count(&h.store, &format!("d{i:02}")), if i < 5 { 2 } else { 1 });
    }
    assert_eq!(h.store.begin().unwrap().get("docs", "d03", "derived:upper").unwrap(), Some(b"BYE 3".to_vec()));
    assert_eq!(h.store.metrics().observer_failures, 0);
    assert!(h.store.dead_letters().unwrap().is_empty());
}

#[test]
fn hostile_guests_are_contained_and_the_host_keeps_serving() {
    let h = start(
        "hostile",
        &[
            ("spin.wasm", "spin"),
            ("bomb.wasm", "memory-bomb"),
            ("panics.wasm", "panics"),
            ("bad.wasm", "bad-write"),
            ("uppercase.wasm", "uppercase"),
        ],
        &(binding("spin", "spin.wasm", "in:spin", "timeout_ms = 100\nmax_attempts = 2\n")
            + &binding("bomb", "bomb.wasm", "in:bomb", "memory_mb = 16\nmax_attempts = 2\n")
            + &binding("panics", "panics.wasm", "in:panic", "max_attempts = 2\n")
            + &binding("bad", "bad.wasm", "in:bad", "writes = [\"docs/derived:*\"]\nmax_attempts = 2\n")
            + &binding("upper", "uppercase.wasm", "raw:text", "writes = [\"docs/derived:upper\"]\n")),
    );
    for col in ["in:spin", "in:bomb", "in:panic", "in:bad"] {
        h.store.run(|t| t.set("docs", "victim", col, "x")).unwrap();
    }
    h.store.run(|t| t.set("docs", "healthy", "raw:text", "still serving")).unwrap();
    let started = Instant::now();
    assert!(h.store.wait_quiescent(QUIET).unwrap(), "hostile notifications end in dead letters");
    let mut dead: Vec<(String, String)> =
        h.store.dead_letters().unwrap().into_iter().map(|d| (d.observer, d.error)).collect();
    dead.sort();
    let names: Vec<&str> = dead.iter().map(|(o, _)| o.as_str()).collect();
    assert_eq!(names, ["bad", "bomb", "panics", "spin"], "{dead:?}");
    let error = |o: &str| dead.iter().find(|(n, _)| n == o).unwrap().1.to_lowercase();
    assert!(error("spin").contains("deadline of 100 ms"), "{}", error("spin"));
    assert!(error("bomb").contains("memory"), "{}", error("bomb"));
    // The panic's own message (logged by the SDK's panic hook), on one line, not just "panicked".
    assert!(
        error("panics").contains("the guest panicked: deliberate panic in the `panics` guest (attempt 2) (at "),
        "{}",
        error("panics")
    );
    assert!(!error("panics").contains('\n'), "{}", error("panics"));
    assert!(error("bad").contains("secret:stolen") && error("bad").contains("not declared"), "{}", error("bad"));
    let t = h.store.begin().unwrap();
    assert_eq!(t.get("docs", "victim", "secret:stolen").unwrap(), None, "a denied write never lands");
    assert_eq!(t.get("docs", "healthy", "derived:upper").unwrap(), Some(b"STILL SERVING".to_vec()));
    assert!(started.elapsed() < QUIET);
}

#[test]
fn malformed_and_wrong_world_components_are_rejected_with_reasons() {
    let runtime = Runtime::new(None).unwrap();
    let dir = std::env::temp_dir().join(format!("percolator-host-reject-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let garbage = dir.join("garbage.wasm");
    std::fs::write(&garbage, b"\0asm\x0d\0\x01\0this is not wasm").unwrap();
    let e = format!("{:#}", runtime.compile_file(&garbage).err().expect("garbage must be rejected"));
    assert!(e.contains("garbage.wasm"), "{e}");
    assert!(!e.contains('\n'), "one line: {e}");
    // Not WebAssembly at all (`echo junk > x.wasm`): one clear line, not wasmparser's dump of
    // the expected and actual magic bytes.
    let junk = dir.join("junk.wasm");
    std::fs::write(&junk, b"junk\n").unwrap();
    let e = format!("{:#}", runtime.compile_file(&junk).err().expect("junk must be rejected"));
    assert_eq!(
        e,
        format!(
            "loading observer {}: not a WebAssembly module: it starts with 6a 75 6e 6b, where a module starts with \
             00 61 73 6d",
            junk.display()
        )
    );
    std::fs::write(&junk, b"").unwrap();
    let e = format!("{:#}", runtime.compile_file(&junk).err().expect("an empty file must be rejected"));
    assert!(e.contains("not a WebAssembly module: the file is empty"), "{e}");
    // Shown quoted (JSON, a log field) it must not grow backslashes.
    assert!(!format!("{e:?}").contains('\\'), "{e:?}");
    let e = format!("{:#}", runtime.compile_file(&guest("wrong-world")).err().expect("wrong world must be rejected"));
    assert!(e.contains("percolator:observer"), "names the expected world: {e}");
    assert!(runtime.compile_file(&guest("uppercase")).is_ok());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_compiled_cache_is_used_and_a_tampered_entry_is_recompiled() {
    let dir = std::env::temp_dir().join(format!("percolator-host-cache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let runtime = Runtime::new(Some(dir.clone())).unwrap();
    let first = runtime.compile_file(&guest("uppercase")).unwrap();
    let entries = |ext: &str| -> Vec<PathBuf> {
        std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.to_string_lossy().ends_with(ext))
            .collect()
    };
    let artifacts = entries(".cwasm");
    assert_eq!(artifacts.len(), 1, "one artifact per component");
    assert!(artifacts[0].file_name().unwrap().to_string_lossy().starts_with(&first.source_hash));
    assert_eq!(entries(".cwasm.sha256").len(), 1);
    // A tampered artifact fails its checksum and is recompiled, not deserialized.
    std::fs::write(&artifacts[0], b"tampered").unwrap();
    let again = Runtime::new(Some(dir.clone())).unwrap().compile_file(&guest("uppercase")).unwrap();
    assert_eq!(again.source_hash, first.source_hash);
    assert_ne!(std::fs::read(&artifacts[0]).unwrap(), b"tampered", "rewritten");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Hosts sharing a cache folder that load the same component at once (as several hosts do when
/// they start) compile it once: the others wait for the entry's lock and load what the first
/// one cached. (Without the lock, each of the four compiled it.)
#[test]
fn hosts_that_load_one_component_at_once_compile_it_once() {
    let dir = std::env::temp_dir().join(format!("percolator-host-cache-once-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let hosts = 4;
    let barrier = Arc::new(std::sync::Barrier::new(hosts));
    let compiled: Vec<u64> = (0..hosts)
        .map(|_| {
            let (dir, barrier) = (dir.clone(), barrier.clone());
            std::thread::spawn(move || {
                let runtime = Runtime::new(Some(dir)).unwrap();
                barrier.wait();
                runtime.compile_file(&guest("document_processor")).unwrap();
                // Functions compiled or taken from the function cache: none if the component
                // came whole from the component cache.
                let stats = runtime.function_cache_stats().unwrap();
                stats.misses + stats.hits
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|t| t.join().unwrap())
        .collect();
    assert_eq!(compiled.iter().filter(|&&functions| functions > 0).count(), 1, "functions per host: {compiled:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The function cache (cranelift's incremental cache, in the cache folder): an edited guest
/// (`counter` → `counter_v2`, the same crate with one more write) compiles most of its
/// functions from the first one's, and what it gets is the very code a compile from nothing
/// makes (the two artifacts are byte for byte equal). Damaged entries are misses, not code.
#[test]
fn an_edited_guest_compiles_from_the_function_cache_into_the_same_code() {
    let tmp = |name: &str| {
        let dir = std::env::temp_dir().join(format!("percolator-fcache-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    };
    let artifact = |dir: &PathBuf, source_hash: &str| -> Vec<u8> {
        let file = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| {
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                name.starts_with(source_hash) && name.ends_with(".cwasm")
            })
            .expect("the component's artifact");
        std::fs::read(file).unwrap()
    };
    // From nothing.
    let fresh = tmp("fresh");
    let runtime = Runtime::new(Some(fresh.clone())).unwrap();
    let v2 = runtime.compile_file(&guest("counter_v2")).unwrap();
    let cold = runtime.function_cache_stats().unwrap();
    // Some functions of a component are identical (shims, trampolines): only those hit.
    assert!(cold.misses > 10 && cold.hits < cold.misses, "{cold:?}");
    let from_nothing = artifact(&fresh, &v2.source_hash);

    // After the first version.
    let warm = tmp("warm");
    let runtime = Runtime::new(Some(warm.clone())).unwrap();
    runtime.compile_file(&guest("counter")).unwrap();
    let before = runtime.function_cache_stats().unwrap();
    runtime.compile_file(&guest("counter_v2")).unwrap();
    let after = runtime.function_cache_stats().unwrap();
    let (hits, misses) = (after.hits - before.hits, after.misses - before.misses);
    assert!(hits > 2 * misses, "{hits} functions from the cache, {misses} compiled");
    assert_eq!(after.failed_writes, 0);
    assert!(artifact(&warm, &v2.source_hash) == from_nothing, "the cached functions made other code");

    // Every pack damaged (each byte after its first 16 flipped) and the artifacts gone: a new
    // runtime on the folder compiles every function again (as from nothing: only its
    // duplicates hit), and the same code.
    let mut damaged = 0;
    for entry in std::fs::read_dir(&warm).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            for pack in std::fs::read_dir(&path).unwrap() {
                let pack = pack.unwrap().path();
                let mut bytes = std::fs::read(&pack).unwrap();
                bytes[16..].iter_mut().for_each(|b| *b ^= 0x40);
                std::fs::write(&pack, bytes).unwrap();
                damaged += 1;
            }
        } else {
            std::fs::remove_file(path).unwrap();
        }
    }
    assert_eq!(damaged, 2, "one pack per compile that added functions");
    let runtime = Runtime::new(Some(warm.clone())).unwrap();
    runtime.compile_file(&guest("counter_v2")).unwrap();
    let again = runtime.function_cache_stats().unwrap();
    // (Which of two identical functions compiling on two threads at once misses varies.)
    assert_eq!(again.hits + again.misses, cold.hits + cold.misses, "{again:?} {cold:?}");
    assert!(again.hits < again.misses, "damaged entries served: {again:?}");
    assert!(artifact(&warm, &v2.source_hash) == from_nothing);
    let _ = std::fs::remove_dir_all(&fresh);
    let _ = std::fs::remove_dir_all(&warm);
}

#[test]
fn a_rejected_reload_keeps_the_old_version_serving() {
    let h = start(
        "reject",
        &[("main.wasm", "uppercase")],
        &binding("main", "main.wasm", "raw:text", "writes = [\"docs/derived:upper\"]\n"),
    );
    let config_file = h.dir.join("pipeline.toml");
    // A broken component under the binding's file name.
    std::fs::copy(guest("wrong-world"), h.dir.join("observers/main.wasm")).unwrap();
    let e = h.pipeline.apply(&Config::load(&config_file).unwrap()).unwrap_err();
    assert!(e.contains("binding main"), "{e}");
    let status = h.pipeline.status();
    assert_eq!(status.generation, 1);
    assert!(status.last_error.is_some_and(|m| m.contains("binding main")));
    h.store.run(|t| t.set("docs", "r", "raw:text", "old version")).unwrap();
    assert!(h.store.wait_quiescent(QUIET).unwrap());
    assert_eq!(h.store.begin().unwrap().get("docs", "r", "derived:upper").unwrap(), Some(b"OLD VERSION".to_vec()));

    // The file put back: what serves is what the configuration says, so nothing is swapped
    // and the generation stays, but the error is gone.
    std::fs::copy(guest("uppercase"), h.dir.join("observers/main.wasm")).unwrap();
    h.pipeline.apply(&Config::load(&config_file).unwrap()).unwrap();
    let status = h.pipeline.status();
    assert_eq!((status.generation, status.last_error), (1, None));
}

#[test]
fn hot_reload_under_load_processes_every_change_exactly_once() {
    let h = start(
        "reload",
        &[("main.wasm", "counter")],
        &binding("main", "main.wasm", "raw:text", "writes = [\"docs/derived:*\"]\n"),
    );
    let _watch = reload::watch(
        h.pipeline.clone(),
        &h.dir.join("pipeline.toml"),
        &h.dir.join("observers"),
        Duration::from_millis(100),
    )
    .unwrap();
    // The writer keeps changing new rows until 50 changes after the reload took effect,
    // however long the reload (a cranelift compile) takes on a busy machine.
    let reloaded = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (store, reloaded) = (h.store.clone(), reloaded.clone());
        std::thread::spawn(move || {
            let (mut i, mut after) = (0usize, 0);
            while after < 50 && i < 20_000 {
                store.run(|t| t.set("docs", format!("r{i:05}"), "raw:text", "x")).unwrap();
                if reloaded.load(std::sync::atomic::Ordering::SeqCst) {
                    after += 1;
                }
                i += 1;
                std::thread::sleep(Duration::from_millis(2));
            }
            i
        })
    };
    std::thread::sleep(Duration::from_millis(150));
    // Replace the component while notifications flow: write elsewhere, then rename into place.
    let tmp = h.dir.join("main.wasm.tmp");
    std::fs::copy(guest("counter-v2"), &tmp).unwrap();
    std::fs::rename(&tmp, h.dir.join("observers/main.wasm")).unwrap();
    let deadline = Instant::now() + QUIET;
    while h.pipeline.status().generation < 2 {
        assert!(Instant::now() < deadline, "reload never happened: {:?}", h.pipeline.status());
        std::thread::sleep(Duration::from_millis(10));
    }
    reloaded.store(true, std::sync::atomic::Ordering::SeqCst);
    // A broken component is rejected and v2 keeps serving.
    std::fs::write(h.dir.join("observers/main.wasm"), b"not wasm at all").unwrap();
    while h.pipeline.status().last_error.is_none() {
        assert!(Instant::now() < deadline, "broken component not reported");
        std::thread::sleep(Duration::from_millis(10));
    }
    let rows = writer.join().unwrap();
    assert!(h.store.wait_quiescent(QUIET).unwrap());
    let t = h.store.begin().unwrap();
    let mut v2 = 0;
    for i in 0..rows {
        let row = format!("r{i:05}");
        assert_eq!(count(&h.store, &row), 1, "row {row}: every change exactly once");
        if t.get("docs", &row, "derived:version").unwrap().as_deref() == Some(b"v2") {
            v2 += 1;
        }
    }
    assert!(v2 >= 50 && v2 < rows, "changes were processed by both versions (v2: {v2} of {rows})");
    assert_eq!(h.pipeline.status().generation, 2);
}

#[test]
fn a_guest_that_cannot_start_under_its_limits_is_rejected_at_load() {
    let h = start(
        "limits",
        &[("upper.wasm", "uppercase")],
        &binding("upper", "upper.wasm", "raw:text", "writes = [\"docs/derived:upper\"]\n"),
    );
    // A 1 MiB cap is below a Rust guest's initial linear memory (over 1 MiB).
    let config_file = h.dir.join("pipeline.toml");
    let body = std::fs::read_to_string(&config_file).unwrap() + "memory_mb = 1\n";
    std::fs::write(&config_file, body).unwrap();
    let e = h.pipeline.apply(&Config::load(&config_file).unwrap()).unwrap_err();
    assert!(e.contains("cannot start under its limits") && e.contains("memory limit"), "{e}");
    assert_eq!(h.pipeline.status().generation, 1, "the old version keeps serving");
}

#[test]
fn a_component_over_its_instance_limit_is_rejected_at_load_with_the_value_it_needs() {
    let h = start(
        "instance-limit",
        &[("upper.wasm", "uppercase")],
        &binding("upper", "upper.wasm", "raw:text", "writes = [\"docs/derived:upper\"]\n"),
    );
    let config_file = h.dir.join("pipeline.toml");
    let body = std::fs::read_to_string(&config_file).unwrap() + "max_instances = 1\nmax_memories = 1\n";
    std::fs::write(&config_file, body).unwrap();
    let e = h.pipeline.apply(&Config::load(&config_file).unwrap()).unwrap_err();
    // A componentized Rust guest instantiates its module, its adapter shims and their fixups.
    assert!(e.contains("core module instances, the binding allows 1 (max_instances)"), "{e}");
    assert!(!e.contains("max_memories"), "one memory is within its limit: {e}");
    assert_eq!(h.pipeline.status().generation, 1, "the old version keeps serving");
}

/// One component bound twice, each binding with its own `[binding.params]`; and a component of
/// the first version of the world (0.1.0, no `config` import) beside them.
#[test]
fn parameters_reach_the_guest_and_a_first_version_component_still_runs() {
    let h = start(
        "params",
        &[("upper.wasm", "uppercase"), ("upper01.wasm", "uppercase-v01")],
        &(binding(
            "shout",
            "upper.wasm",
            "raw:text",
            "writes = [\"docs/derived:shout\"]\n[binding.params]\ntarget = \"derived:shout\"\n",
        ) + &binding(
            "yell",
            "upper.wasm",
            "raw:text",
            "writes = [\"docs/derived:yell\"]\n[binding.params]\ntarget = \"derived:yell\"\nunused = 3\n",
        ) + &binding("v01", "upper01.wasm", "raw:other", "writes = [\"docs/derived:upper\"]\n")),
    );
    h.store.run(|t| t.set("docs", "r1", "raw:text", "hi")).unwrap();
    h.store.run(|t| t.set("docs", "r2", "raw:other", "old world")).unwrap();
    assert!(h.store.wait_quiescent(QUIET).unwrap());
    assert!(h.store.dead_letters().unwrap().is_empty(), "{:?}", h.store.dead_letters().unwrap());
    let t = h.store.begin().unwrap();
    assert_eq!(t.get("docs", "r1", "derived:shout").unwrap(), Some(b"HI".to_vec()));
    assert_eq!(t.get("docs", "r1", "derived:yell").unwrap(), Some(b"HI".to_vec()));
    assert_eq!(t.get("docs", "r1", "derived:upper").unwrap(), None, "the default target is not written");
    assert_eq!(t.get("docs", "r2", "derived:upper").unwrap(), Some(b"OLD WORLD".to_vec()));
}

/// A reload compiles without holding the pipeline: while a component is being read and
/// compiled, `status` answers and lists it with its elapsed time, and the current generation
/// keeps serving. The component here is a FIFO whose bytes arrive when the test writes them, so
/// "compiling" lasts exactly as long as the test wants, whatever the machine's speed.
#[test]
fn a_reload_compiles_in_the_background_while_the_current_version_serves() {
    let h = start(
        "background",
        &[("upper.wasm", "uppercase")],
        &binding("upper", "upper.wasm", "raw:text", "writes = [\"docs/derived:upper\"]\n"),
    );
    let fifo = h.dir.join("observers/slow.wasm");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(made.success());
    let config_file = h.dir.join("pipeline.toml");
    let body = std::fs::read_to_string(&config_file).unwrap()
        + &binding("slow", "slow.wasm", "raw:slow", "writes = [\"docs/derived:upper\"]\n");
    std::fs::write(&config_file, body).unwrap();
    let config = Config::load(&config_file).unwrap();
    let pipeline = h.pipeline.clone();
    let reload = std::thread::spawn(move || pipeline.apply(&config));
    let deadline = Instant::now() + QUIET;
    let compiling = loop {
        let status = h.pipeline.status();
        // (`upper`, unchanged and cached, may show for a moment before.)
        if let Some(c) = status.compiling.iter().find(|c| c.binding == "slow") {
            break c.clone();
        }
        assert!(Instant::now() < deadline, "the reload never showed as compiling");
        std::thread::sleep(Duration::from_millis(5));
    };
    assert_eq!((compiling.binding.as_str(), compiling.wasm.as_path()), ("slow", fifo.as_path()));
    // The current generation serves meanwhile.
    h.store.run(|t| t.set("docs", "r1", "raw:text", "served")).unwrap();
    assert!(h.store.wait_quiescent(QUIET).unwrap());
    assert_eq!(h.store.begin().unwrap().get("docs", "r1", "derived:upper").unwrap(), Some(b"SERVED".to_vec()));
    let status = h.pipeline.status();
    assert_eq!(status.generation, 1);
    assert!(status.compiling[0].elapsed >= compiling.elapsed, "the elapsed time grows");
    // The component's bytes arrive: the reload finishes.
    std::fs::write(&fifo, std::fs::read(guest("uppercase")).unwrap()).unwrap();
    reload.join().unwrap().unwrap();
    let status = h.pipeline.status();
    assert_eq!((status.generation, status.compiling.len(), status.bindings.len()), (2, 0, 2));
}

/// The run counts of a binding (runs, failures, their time) are totals over the store's life:
/// `persist_counts` (which `up` calls every 10 s and when it stops) saves them in the store,
/// and the next host on the store continues from them, the run-time histogram too.
#[test]
fn run_counts_continue_across_a_restart_from_their_last_save() {
    let bindings = binding("upper", "uppercase.wasm", "raw:text", "writes = [\"docs/derived:upper\"]\n")
        + "\n[[binding]]\nname = \"denied\"\nwasm = \"uppercase.wasm\"\ntable = \"bad\"\ncolumn = \"raw:text\"\nmax_attempts = 1\n";
    let h = start("counts", &[("uppercase.wasm", "uppercase")], &bindings);
    let write = |h: &Host, table: &str, row: &str| {
        h.store.run(|t| t.set(table, row, "raw:text", "some text")).unwrap();
        assert!(h.store.wait_quiescent(QUIET).unwrap(), "quiescent");
    };
    let counts =
        |h: &Host, name: &str| h.pipeline.status().bindings.into_iter().find(|b| b.name == name).unwrap().counts;
    let committed = |h: &Host, name: &str| {
        h.pipeline.status().bindings.into_iter().find(|b| b.name == name).unwrap().settled.committed
    };
    for i in 0..5 {
        write(&h, "docs", &format!("d{i}"));
    }
    write(&h, "bad", "x"); // denied: the run fails
    let (upper, denied) = (counts(&h, "upper"), counts(&h, "denied"));
    assert_eq!((upper.runs, upper.failures, denied.runs, denied.failures), (5, 0, 1, 1));
    assert_eq!((committed(&h, "upper"), committed(&h, "denied")), (5, 0), "a failed run is no success");
    assert!(upper.run_time > Duration::ZERO);
    h.pipeline.persist_counts().unwrap();
    // Counted after the last save: lost when the host stops without saving (killed).
    write(&h, "docs", "after-the-save");
    assert_eq!(counts(&h, "upper").runs, 6);

    let h = h.restart(2);
    let (again, denied_again) = (counts(&h, "upper"), counts(&h, "denied"));
    assert_eq!((again.runs, again.failures, again.run_time), (5, 0, upper.run_time), "as saved");
    assert_eq!(committed(&h, "upper"), 5, "as saved");
    assert_eq!((denied_again.runs, denied_again.failures), (1, 1));
    assert_eq!(again.buckets, upper.buckets, "the run-time histogram continues, as saved");
    assert_eq!(again.p50, upper.p50);
    // They go on from there, and a save with nothing new writes the same.
    write(&h, "docs", "d9");
    write(&h, "bad", "y");
    h.pipeline.persist_counts().unwrap();
    h.pipeline.persist_counts().unwrap();
    let (upper, denied) = (counts(&h, "upper"), counts(&h, "denied"));
    assert_eq!((upper.runs, upper.failures, denied.runs, denied.failures), (6, 0, 2, 2));
    assert_eq!(upper.buckets.iter().sum::<u64>(), 6, "the saved runs and this process's");
    let h = h.restart(1);
    assert_eq!((counts(&h, "upper").runs, counts(&h, "denied").failures), (6, 2));
    assert_eq!(committed(&h, "upper"), 6);
}

/// The compiled-component cache stays under its limit: a compile that adds a component removes
/// the least recently used ones, a load from the cache makes a component recent, and a runtime
/// never removes what it loaded itself.
#[test]
fn the_cache_keeps_under_its_limit_the_components_used_last() {
    let dir = std::env::temp_dir().join(format!("percolator-cache-limit-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let entries = || {
        let mut n: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.ends_with(".cwasm"))
            .collect();
        n.sort();
        n
    };
    let age = |name: &str, secs: u64| {
        let t = std::time::SystemTime::now() - Duration::from_secs(secs);
        std::fs::File::options().write(true).open(dir.join(name)).unwrap().set_modified(t).unwrap();
    };
    // Three components, compiled by a runtime with the default limit (4 GiB): all kept.
    let first = Runtime::new(Some(dir.clone())).unwrap();
    for g in ["uppercase", "counter", "word_count"] {
        first.compile_file(&guest(g)).unwrap();
    }
    let all = entries();
    assert_eq!(all.len(), 3, "{all:?}");
    let size = |name: &str| std::fs::metadata(dir.join(name)).unwrap().len();
    let name_of = |g: &str| {
        let before: std::collections::HashSet<String> = entries().into_iter().collect();
        let probe = Runtime::new(Some(dir.clone())).unwrap();
        probe.compile_file(&guest(g)).unwrap();
        assert_eq!(entries().into_iter().collect::<std::collections::HashSet<_>>(), before, "{g} was compiled again");
        // The one whose time the load renewed.
        entries().into_iter().max_by_key(|n| std::fs::metadata(dir.join(n)).unwrap().modified().unwrap()).unwrap()
    };
    let (upper, counter, words) = (name_of("uppercase"), name_of("counter"), name_of("word_count"));
    // Ages: counter the oldest, then uppercase, then word_count.
    age(&counter, 300);
    age(&upper, 200);
    age(&words, 100);
    // A load from the cache makes uppercase the most recent.
    let second = Runtime::new(Some(dir.clone())).unwrap();
    second.compile_file(&guest("uppercase")).unwrap();
    assert!(
        std::fs::metadata(dir.join(&upper)).unwrap().modified().unwrap()
            > std::time::SystemTime::now() - Duration::from_secs(60)
    );
    // A limit that holds uppercase and one more: counter (the least recently used) goes.
    let digests = 3 * 64;
    let limit = size(&upper) + size(&words) + size(&counter).min(size(&words)) / 2 + digests;
    let pruned = second.set_cache_limit(limit).unwrap();
    assert_eq!(
        (pruned.components, entries()),
        (1, {
            let mut k = vec![upper.clone(), words.clone()];
            k.sort();
            k
        })
    );
    // A limit of one byte: everything but what this runtime loaded (uppercase) goes.
    let pruned = second.set_cache_limit(1).unwrap();
    assert_eq!((pruned.components, entries()), (1, vec![upper.clone()]));
    // A compile under that limit keeps the new component (this runtime loaded it) and uppercase.
    second.compile_file(&guest("counter")).unwrap();
    assert_eq!(entries(), {
        let mut k = vec![upper.clone(), counter.clone()];
        k.sort();
        k
    });
    // Without a cache folder there is nothing to prune.
    let none = Runtime::new(None).unwrap();
    assert_eq!(none.set_cache_limit(1), None);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A guest whose read meets a store out of reach gets a `storage` error and returns it as its
/// own failure; the host still knows the run met the store's failure, not the observer's: with
/// one attempt allowed, no dead letter, no failure, and the run commits once the store is back.
#[test]
fn a_guest_that_returns_an_unavailable_stores_error_is_no_failure() {
    let dir = std::env::temp_dir().join(format!("percolator-host-unavailable-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("observers")).unwrap();
    std::fs::copy(guest("counter"), dir.join("observers/counter.wasm")).unwrap();
    std::fs::write(
        dir.join("pipeline.toml"),
        format!(
            "[store]\npath = \"store.redb\"\n[observers]\ndir = \"observers\"\n{}",
            binding("count", "counter.wasm", "raw:text", "writes = [\"docs/derived:count\"]\nmax_attempts = 1\n")
        ),
    )
    .unwrap();
    let config = Config::load(&dir.join("pipeline.toml")).unwrap();
    let backend = Arc::new(percolator_testkit::Flaky::default());
    let store = Store::with_backend(backend.clone(), percolator_store::StoreConfig::default()).unwrap();
    let pipeline = Arc::new(percolator_server::pipeline::Pipeline::new(store.clone(), Runtime::new(None).unwrap()));
    pipeline.apply(&config).unwrap();
    store.run(|t| t.set("docs", "d1", "raw:text", "hello")).unwrap();

    // The guest's own read (`derived:count`) meets a store out of reach.
    *backend.unavailable_column.lock().unwrap() = Some("derived:count".into());
    let scanner = store.start_scanner(percolator_store::ScannerConfig::default());
    let deadline = Instant::now() + QUIET;
    while store.metrics().observer_store_failures < 2 {
        let m = store.metrics();
        assert_eq!((m.observer_failures, m.dead_letters), (0, 0), "counted as the observer's failure: {m:?}");
        assert!(Instant::now() < deadline, "no run met the unavailable store: {m:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let m = store.metrics();
    assert_eq!((m.observer_runs, m.observer_failures, m.dead_letters), (0, 0, 0), "{m:?}");
    assert!(store.dead_letters().unwrap().is_empty());

    *backend.unavailable_column.lock().unwrap() = None;
    assert!(store.wait_quiescent(QUIET).unwrap());
    drop(scanner);
    assert_eq!(count(&store, "d1"), 1, "the run committed once the store was back");
    let m = store.metrics();
    assert_eq!((m.observer_runs, m.observer_failures, m.dead_letters), (1, 0, 0), "{m:?}");
    drop(pipeline);
    let _ = std::fs::remove_dir_all(&dir);
}
