//! Sink transforms (`wit/sink/sink.wit`): the example (`guest-examples/sink-title`) maps a
//! batch; hostile ones (`guest-examples/sink-hostile`, one misbehaviour per `mode` parameter)
//! each fail with their own error while the host and other transforms go on; a component of
//! the observer world is refused at load, and a transform at the observer's; the output is
//! deterministic; a guest that hands back far more than its memory limit fails without making
//! the host allocate it. Needs `scripts/build-guests` (→ `target/guests/`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use percolator_runtime::{Limits, Runtime, SinkTransform, TransformError};
use percolator_store::{CellRef, Change, Timestamp};

fn guest(name: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/guests").join(name);
    assert!(path.exists(), "{} is missing: run scripts/build-guests first", path.display());
    path
}

fn params(pairs: &[(&str, &str)]) -> Arc<BTreeMap<String, String>> {
    Arc::new(pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect())
}

fn change(row: &str, column: &str, value: Option<&str>, ts: u64) -> Change {
    Change {
        cell: CellRef::new("pages", row.as_bytes(), column),
        value: value.map(|v| v.as_bytes().to_vec()),
        commit_ts: Timestamp::from_raw(ts),
    }
}

fn transform(runtime: &Runtime, file: &str, limits: Limits, p: &[(&str, &str)]) -> SinkTransform {
    let compiled = runtime.compile_transform_file(&guest(file)).unwrap();
    let t = runtime.transform("test-sink", &compiled, limits, params(p));
    t.check_instantiates().unwrap();
    t
}

fn hostile(runtime: &Runtime, mode: &str, limits: Limits) -> SinkTransform {
    transform(runtime, "sink_hostile.wasm", limits, &[("mode", mode)])
}

/// Pages with and without titles, a deleted page, and a change of another column.
fn pages() -> Vec<Change> {
    vec![
        change("a.com", "raw:html", Some("<html><title> Fish &amp; Chips </title></html>"), 10),
        change("a.com", "raw:lang", Some("en"), 10),
        change("b.com", "raw:html", None, 12),
        change("c.com", "raw:html", Some("<p>untitled</p>"), 12),
        change("d.com", "raw:html", Some("<TITLE>Second\nversion</TITLE>"), 15),
    ]
}

#[test]
fn a_transform_is_shared_by_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<SinkTransform>();
    send_sync::<percolator_runtime::CompiledTransform>();
    let runtime = Runtime::new(None).unwrap();
    let t = Arc::new(transform(&runtime, "sink_title.wasm", Limits::default(), &[]));
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let t = t.clone();
            std::thread::spawn(move || t.apply(&pages()).unwrap().len())
        })
        .collect();
    assert!(threads.into_iter().all(|h| h.join().unwrap() == 4));
}

#[test]
fn the_title_example_keeps_one_column_and_derives_titles_with_the_input_versions() {
    let runtime = Runtime::new(None).unwrap();
    let t = transform(&runtime, "sink_title.wasm", Limits::default(), &[]);
    assert_eq!(
        t.apply(&pages()).unwrap(),
        vec![
            change("a.com", "page:title", Some("Fish & Chips"), 10),
            change("b.com", "page:title", None, 12),
            change("c.com", "page:title", None, 12),
            change("d.com", "page:title", Some("Second version"), 15),
        ]
    );
    assert_eq!(t.apply(&[]).unwrap(), vec![], "an empty batch: nothing to deliver");
    // Parameters: another target column; the source column of the dropped change.
    let t = transform(&runtime, "sink_title.wasm", Limits::default(), &[("source", "raw:lang"), ("target", "page:x")]);
    assert_eq!(t.apply(&pages()).unwrap(), vec![change("a.com", "page:x", None, 10)]);
    let counts = t.stats().counts();
    assert_eq!((counts.runs, counts.failures), (1, 0));
}

#[test]
fn the_output_is_the_same_every_time_and_per_change() {
    let runtime = Runtime::new(None).unwrap();
    let t = transform(&runtime, "sink_title.wasm", Limits::default(), &[]);
    let batch = pages();
    let whole = t.apply(&batch).unwrap();
    assert_eq!(t.apply(&batch).unwrap(), whole);
    // Redelivered split differently after a crash: the same changes.
    let mut split = t.apply(&batch[..3]).unwrap();
    split.extend(t.apply(&batch[3..]).unwrap());
    assert_eq!(split, whole);
    // Clocks and randomness read through WASI are fixed and seeded: two runs agree, and the
    // wall clock stands at 2000-01-01T00:00:00Z.
    let t = hostile(&runtime, "entropy", Limits::default());
    let first = t.apply(&batch).unwrap();
    assert_eq!(t.apply(&batch).unwrap(), first);
    let value = String::from_utf8(first[0].value.clone().unwrap()).unwrap();
    assert!(value.starts_with("946684800.000000000 "), "{value}");
    assert_eq!(first.iter().map(|c| c.commit_ts.raw()).collect::<Vec<_>>(), [10, 10, 12, 12, 15]);
    // The observers' sandbox: no environment, no arguments.
    let seen = hostile(&runtime, "environment", Limits::default()).apply(&batch[..1]).unwrap();
    assert_eq!(seen[0].value.as_deref(), Some(&b"0 0"[..]));
}

#[test]
fn hostile_transforms_fail_with_their_own_error_and_the_host_goes_on() {
    let runtime = Runtime::new(None).unwrap();
    let batch = pages();

    let e = hostile(&runtime, "trap", Limits::default()).apply(&batch).unwrap_err();
    match &e {
        TransformError::Trap(m) => assert!(m.contains("the guest panicked: deliberate panic on a batch of 5"), "{m}"),
        other => panic!("{other:?}"),
    }

    let limits = Limits { timeout: Duration::from_millis(100), ..Limits::default() };
    let started = Instant::now();
    let e = hostile(&runtime, "spin", limits).apply(&batch).unwrap_err();
    assert_eq!(e, TransformError::Deadline { timeout: Duration::from_millis(100) });
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    assert_eq!(e.to_string(), "the transform exceeded its deadline of 100 ms");

    let limits = Limits { memory_bytes: 32 << 20, ..Limits::default() };
    match hostile(&runtime, "memory", limits).apply(&batch).unwrap_err() {
        TransformError::Memory { limit, message } => {
            assert_eq!(limit, 32 << 20);
            assert!(message.starts_with("memory limit of 32 MiB exceeded: the instance asked for"), "{message}");
        }
        other => panic!("{other:?}"),
    }

    let e = hostile(&runtime, "foreign-ts", Limits::default()).apply(&batch).unwrap_err();
    assert_eq!(
        e.to_string(),
        "the transform broke its contract: output change 0: (table \"pages\", row \"a.com\", column \"raw:html\", \
         commit-ts 16) carries a commit-ts that is none of the batch's (10, 12, 15): every output change must carry \
         the commit-ts of an input change it derives from"
    );
    assert!(matches!(e, TransformError::Contract { index: 0, .. }));

    match hostile(&runtime, "unordered", Limits::default()).apply(&batch).unwrap_err() {
        TransformError::Contract { index: 1, message } => {
            assert!(message.contains("commit-ts 12) comes after a change of commit-ts 15"), "{message}")
        }
        other => panic!("{other:?}"),
    }

    match hostile(&runtime, "bad-column", Limits::default()).apply(&batch).unwrap_err() {
        TransformError::Contract { index: 0, message } => {
            assert!(message.contains("column \"__secret\"") && message.contains("reserved namespace"), "{message}")
        }
        other => panic!("{other:?}"),
    }

    match hostile(&runtime, "duplicate", Limits::default()).apply(&batch).unwrap_err() {
        TransformError::Contract { index: 1, message } => assert_eq!(
            message,
            "(table \"pages\", row \"a.com\", column \"page:same\", commit-ts 10) has another value than output \
             change 0 of the same cell and commit-ts: the destination could not tell which is that version's"
        ),
        other => panic!("{other:?}"),
    }
    // The same value twice is no ambiguity.
    let twice = [change("a.com", "raw:html", Some("same"), 10), change("a.com", "raw:lang", Some("same"), 10)];
    assert_eq!(hostile(&runtime, "duplicate", Limits::default()).apply(&twice).unwrap().len(), 2);

    let t = hostile(&runtime, "error", Limits::default());
    assert_eq!(t.apply(&batch).unwrap_err(), TransformError::Guest("refusing a batch of 5 changes".into()));
    assert_eq!(t.apply(&batch[..1]).unwrap_err(), TransformError::Guest("refusing a batch of 1 changes".into()));
    assert_eq!(t.stats().counts().failures, 2);

    // Unaffected: the runtime still loads and runs transforms; the pass-through mode returns
    // the batch as it is.
    assert_eq!(hostile(&runtime, "none", Limits::default()).apply(&batch).unwrap(), batch);
    assert_eq!(transform(&runtime, "sink_title.wasm", Limits::default(), &[]).apply(&batch).unwrap().len(), 4);
}

#[test]
fn a_component_of_the_other_world_is_refused_at_load_with_both_worlds_named() {
    let runtime = Runtime::new(None).unwrap();
    let e = format!("{:#}", runtime.compile_transform_file(&guest("uppercase.wasm")).err().unwrap());
    assert!(
        e.contains(
            "the component is an observer (it exports `observe`, the export of the world \
             percolator:observer/observer); a sink transform must be a component of the world percolator:sink/transform@0.1.0, which exports `transform"
        ),
        "{e}"
    );
    let e = format!("{:#}", runtime.compile_transform_file(&guest("wrong_world.wasm")).err().unwrap());
    assert!(e.contains("the component is an observer"), "{e}");
    let e = format!("{:#}", runtime.compile_file(&guest("sink_title.wasm")).err().unwrap());
    assert!(
        e.contains(
            "the component is a sink transform (it exports `transform` of the world percolator:sink/transform), not \
             an observer"
        ),
        "{e}"
    );
}

/// A core module of the world `transform` of `wit`, whose `transform` takes nothing and returns
/// the number 7: a transform's name with another type.
fn mistyped_transform() -> Vec<u8> {
    use wasm_encoder::{
        CodeSection, ExportKind, ExportSection, Function, FunctionSection, Instruction as I, Module, TypeSection,
        ValType,
    };
    let mut types = TypeSection::new();
    types.ty().function([], [ValType::I32]);
    let mut functions = FunctionSection::new();
    functions.function(0);
    let mut exports = ExportSection::new();
    exports.export("transform", ExportKind::Func, 0);
    let mut code = CodeSection::new();
    let mut f = Function::new([]);
    f.instruction(&I::I32Const(7)).instruction(&I::End);
    code.function(&f);
    let mut module = Module::new();
    module.section(&types).section(&functions).section(&exports).section(&code);
    let mut bytes = module.finish();
    let mut resolve = wit_parser::Resolve::default();
    let wit = "package test:mistyped; world transform { export transform: func() -> u32; }";
    let package = resolve.push_str("mistyped.wit", wit).unwrap();
    let world = resolve.select_world(&[package], Some("transform")).unwrap();
    wit_component::embed_component_metadata(&mut bytes, &resolve, world, wit_component::StringEncoding::UTF8).unwrap();
    bytes
}

#[test]
fn a_transform_export_of_another_type_is_refused_at_load() {
    let runtime = Runtime::new(None).unwrap();
    let e = format!("{:#}", runtime.compile_transform(&mistyped_transform()).err().unwrap());
    assert!(
        e.starts_with(
            "the component's `transform` export does not have the type of the percolator:sink/transform@0.1.0 \
             world's (func(batch: list<change>) -> result<list<change>, string>)"
        ),
        "{e}"
    );
}

/// A core module (carrying the sink world's component type) whose `transform` returns `n`
/// changes that all point at the same 1 MiB value: 2 MiB of guest memory claiming `n` MiB of
/// output. Built with `wasm-encoder`, as no Rust guest can alias its output safely.
fn aliasing_transform(n: u32, commit_ts: u64) -> Vec<u8> {
    use wasm_encoder::{
        CodeSection, ConstExpr, DataSection, ExportKind, ExportSection, Function, FunctionSection, GlobalSection,
        GlobalType, Instruction as I, MemorySection, MemoryType, Module, TypeSection, ValType,
    };
    const STRINGS: u32 = 16; // "pages", "raw:html", "r"
    const RET: u32 = 32; // result<list<change>, string>: tag, pointer, length
    const RECORDS: u32 = 64; // n records of 48 bytes
    const BLOB: u32 = 1 << 20; // the one value, 1 MiB of zeros
    const HEAP: i32 = 2 << 20; // cabi_realloc's bump allocator starts here
    let mut records = Vec::new();
    for _ in 0..n {
        let mut r = [0u8; 48];
        let mut put = |at: usize, v: u32| r[at..at + 4].copy_from_slice(&v.to_le_bytes());
        put(0, STRINGS);
        put(4, 5);
        put(8, STRINGS + 13);
        put(12, 1);
        put(16, STRINGS + 5);
        put(20, 8);
        put(24, 1); // some
        put(28, BLOB);
        put(32, BLOB);
        r[40..48].copy_from_slice(&commit_ts.to_le_bytes());
        records.extend_from_slice(&r);
    }
    let mut ret = vec![0u8; 12];
    ret[4..8].copy_from_slice(&RECORDS.to_le_bytes());
    ret[8..12].copy_from_slice(&n.to_le_bytes());

    let mut types = TypeSection::new();
    types.ty().function([ValType::I32; 4], [ValType::I32]); // cabi_realloc
    types.ty().function([ValType::I32; 2], [ValType::I32]); // transform
    let mut functions = FunctionSection::new();
    functions.function(0).function(1);
    let mut memories = MemorySection::new();
    memories.memory(MemoryType { minimum: 40, maximum: None, memory64: false, shared: false, page_size_log2: None });
    let mut globals = GlobalSection::new();
    globals.global(GlobalType { val_type: ValType::I32, mutable: true, shared: false }, &ConstExpr::i32_const(HEAP));
    let mut exports = ExportSection::new();
    exports.export("memory", ExportKind::Memory, 0).export("cabi_realloc", ExportKind::Func, 0).export(
        "transform",
        ExportKind::Func,
        1,
    );
    let mut code = CodeSection::new();
    let mut realloc = Function::new([]);
    // Bump by new_size (8-aligned); returns the old top.
    for i in [
        I::GlobalGet(0),
        I::GlobalGet(0),
        I::LocalGet(3),
        I::I32Const(7),
        I::I32Add,
        I::I32Const(-8),
        I::I32And,
        I::I32Add,
        I::GlobalSet(0),
        I::End,
    ] {
        realloc.instruction(&i);
    }
    code.function(&realloc);
    let mut transform = Function::new([]);
    transform.instruction(&I::I32Const(RET as i32)).instruction(&I::End);
    code.function(&transform);
    let mut data = DataSection::new();
    data.active(0, &ConstExpr::i32_const(STRINGS as i32), b"pagesraw:htmlr".iter().copied());
    data.active(0, &ConstExpr::i32_const(RET as i32), ret);
    data.active(0, &ConstExpr::i32_const(RECORDS as i32), records);
    let mut module = Module::new();
    module
        .section(&types)
        .section(&functions)
        .section(&memories)
        .section(&globals)
        .section(&exports)
        .section(&code)
        .section(&data);
    let mut bytes = module.finish();

    let mut resolve = wit_parser::Resolve::default();
    let package = resolve.push_str("sink.wit", include_str!("../../../wit/sink/sink.wit")).unwrap();
    let world = resolve.select_world(&[package], Some("transform")).unwrap();
    wit_component::embed_component_metadata(&mut bytes, &resolve, world, wit_component::StringEncoding::UTF8).unwrap();
    bytes
}

#[test]
fn an_output_larger_than_the_memory_limit_fails_without_being_copied() {
    let runtime = Runtime::new(None).unwrap();
    let limits = Limits { memory_bytes: 8 << 20, ..Limits::default() };
    let batch = [change("r", "raw:html", Some("x"), 7)];
    // Within the limit: four aliases of the 1 MiB value are four copies, 4 MiB.
    let compiled = runtime.compile_transform(&aliasing_transform(4, 7)).unwrap();
    let out = runtime.transform("alias", &compiled, limits, params(&[])).apply(&batch).unwrap();
    assert_eq!(out.len(), 4);
    assert!(out.iter().all(|c| c.value.as_ref().map(Vec::len) == Some(1 << 20) && c.cell.column == "raw:html"));
    // 10 000 aliases claim 10 GB: refused once the copies pass 8 MiB.
    let compiled = runtime.compile_transform(&aliasing_transform(10_000, 7)).unwrap();
    let started = Instant::now();
    let e = runtime.transform("alias", &compiled, limits, params(&[])).apply(&batch).unwrap_err();
    assert_eq!(e, TransformError::OutputTooLarge { limit: 8 << 20 });
    assert!(started.elapsed() < Duration::from_secs(10));
}
