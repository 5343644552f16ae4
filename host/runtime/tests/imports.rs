//! A component whose imports do not match the `observer` world is rejected with every
//! unsatisfied import named at once, and the list of what the world provides (wasmtime's
//! linker names only the first).

use percolator_runtime::Runtime;
use wasm_encoder::{
    Component, ComponentImportSection, ComponentTypeRef, ComponentTypeSection, ComponentValType, InstanceType,
    PrimitiveValType,
};

/// An instance type exporting functions `() -> u64` (when `u64` is set) or `()`.
fn instance(functions: &[(&str, bool)]) -> InstanceType {
    let mut ty = InstanceType::new();
    for (i, (name, returns)) in functions.iter().enumerate() {
        let result = returns.then_some(ComponentValType::Primitive(PrimitiveValType::U64));
        ty.ty().function().params::<[(&str, ComponentValType); 0], _>([]).result(result);
        ty.export(*name, ComponentTypeRef::Func(i as u32));
    }
    ty
}

/// A component that imports `instances` (name → its functions) and the top-level functions
/// `functions`, and does nothing.
fn component(instances: &[(&str, &[(&str, bool)])], functions: &[&str]) -> Vec<u8> {
    let mut types = ComponentTypeSection::new();
    for (_, f) in instances {
        types.instance(&instance(f));
    }
    for _ in functions {
        types.function().params::<[(&str, ComponentValType); 0], _>([]).result(None);
    }
    let mut imports = ComponentImportSection::new();
    for (i, (name, _)) in instances.iter().enumerate() {
        imports.import(*name, ComponentTypeRef::Instance(i as u32));
    }
    for (i, name) in functions.iter().enumerate() {
        imports.import(*name, ComponentTypeRef::Func((instances.len() + i) as u32));
    }
    let mut c = Component::new();
    c.section(&types).section(&imports);
    c.finish()
}

#[test]
fn every_unsatisfied_import_is_named_with_what_the_world_provides() {
    let runtime = Runtime::new(None).unwrap();
    let bytes = component(
        &[
            ("percolator:observer/txn@0.1.0", &[("start-ts", true), ("commit-now", false), ("abort", false)]),
            ("percolator:observer/clock@0.1.0", &[("now", true)]),
            ("wasi:http/outgoing-handler@0.2.0", &[("handle", false)]),
        ],
        &["print"],
    );
    let e = format!("{:#}", runtime.compile(&bytes).err().expect("must be rejected"));
    assert_eq!(
        e,
        "the component's imports do not match the percolator:observer world: it imports 5 items that the world \
         does not provide: function `commit-now` of `percolator:observer/txn@0.1.0`, function `abort` of \
         `percolator:observer/txn@0.1.0`, interface `percolator:observer/clock@0.1.0`, interface \
         `wasi:http/outgoing-handler@0.2.0`, function `print`; the world `observer` provides \
         percolator:observer/types@0.3.0 (types only), percolator:observer/txn@0.3.0 (get, get-many, scan, set, \
         delete, notify-weak, combine, start-ts), percolator:observer/log@0.3.0 (log), \
         percolator:observer/config@0.3.0 (get, all), the interfaces of percolator:observer@0.2.0 and @0.1.0, and \
         WASI 0.2.0 (deny-by-default: no files, sockets or environment)"
    );
}

#[test]
fn provided_imports_pass_on_to_the_export_check() {
    let runtime = Runtime::new(None).unwrap();
    // Imports only what the world provides (a newer patch version too), exports nothing.
    let bytes = component(&[("percolator:observer/txn@0.1.2", &[("start-ts", true)])], &[]);
    let e = format!("{:#}", runtime.compile(&bytes).err().expect("must be rejected"));
    assert!(e.contains("does not export `observe`") && e.contains("(it exports nothing)"), "{e}");
    assert!(!e.contains("imports"), "{e}");
}

#[test]
fn the_wrong_world_guest_is_told_what_it_exports() {
    // `wrong-world` imports nothing and exports an `observe` of another type.
    let dir = std::env::var_os("PERCOLATOR_GUESTS").map(std::path::PathBuf::from).unwrap_or_else(|| {
        let here = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        here.ancestors().find(|p| p.join("Cargo.lock").is_file()).unwrap_or(here).join("target/guests")
    });
    let runtime = Runtime::new(None).unwrap();
    let e = format!("{:#}", runtime.compile_file(&dir.join("wrong_world.wasm")).err().expect("must be rejected"));
    assert!(e.contains("percolator:observer"), "{e}");
    // Not "does not export `observe` (it exports `observe`)": the type is what differs.
    assert!(e.contains("`observe` export does not have the type") && !e.contains("does not export"), "{e}");
}
