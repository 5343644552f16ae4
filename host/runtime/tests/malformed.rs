//! Malformed component files: truncated prefixes and byte-mutated copies of real guests are
//! rejected with a one-line error, and never panic (wit-component used to panic on a truncated
//! core module, which killed the reload thread). A property test with a fixed seed: the "fuzz"
//! of component files, deterministic so that a failure reproduces.

use std::path::{Path, PathBuf};

use percolator_runtime::Runtime;
use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, RngAlgorithm, TestRng, TestRunner};

/// Where `scripts/build-guests` puts the guest modules (`PERCOLATOR_GUESTS` overrides).
fn guest(name: &str) -> Vec<u8> {
    let dir = std::env::var_os("PERCOLATOR_GUESTS").map(PathBuf::from).unwrap_or_else(|| {
        let here = Path::new(env!("CARGO_MANIFEST_DIR"));
        here.ancestors().find(|p| p.join("Cargo.lock").is_file()).unwrap_or(here).join("target/guests")
    });
    let p = dir.join(format!("{name}.wasm"));
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e} (run scripts/build-guests first)", p.display()))
}

fn runner(cases: u32) -> TestRunner {
    let config = ProptestConfig { cases, failure_persistence: None, ..ProptestConfig::default() };
    TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &[0x5e; 32]))
}

/// Where the custom section wit-component decodes (`component-type…`) lies: the bytes whose
/// corruption made it panic.
fn component_type_section(bytes: &[u8]) -> std::ops::Range<usize> {
    for payload in wasmparser::Parser::new(0).parse_all(bytes) {
        if let Ok(wasmparser::Payload::CustomSection(s)) = payload
            && s.name().starts_with("component-type")
        {
            return s.range();
        }
    }
    panic!("no component-type section: not a wit-bindgen module");
}

#[test]
fn every_truncated_prefix_is_an_error_never_a_panic() {
    let runtime = Runtime::new(None).unwrap();
    let good = guest("uppercase");
    let types = component_type_section(&good);
    // Cut anywhere, and often inside the component-type section.
    let cut = prop_oneof![0..good.len(), types.clone()];
    runner(300)
        .run(&cut, |len| {
            let e = runtime.compile(&good[..len]).err().map(|e| format!("{e:#}"));
            prop_assert!(e.is_some(), "a prefix of {len} of {} bytes compiled", good.len());
            let e = e.unwrap();
            prop_assert!(!e.contains('\n'), "one line: {e}");
            Ok(())
        })
        .unwrap();
    // The case that panicked: the section header is there, its body cut short.
    let e = format!("{:#}", runtime.compile(&good[..types.start + 8]).err().unwrap());
    assert!(e.contains("truncated or corrupt"), "{e}");
}

#[test]
fn byte_mutated_copies_are_rejected_or_compile_but_never_panic() {
    let runtime = Runtime::new(None).unwrap();
    for name in ["uppercase", "wrong_world"] {
        let good = guest(name);
        let types = component_type_section(&good);
        // A few flipped bytes, mostly in the preamble, section headers and the component-type
        // section (the decoders' input); a flip in code may still compile, which is fine.
        let position = prop_oneof![0..64usize, types.clone(), 0..good.len()];
        let flips = proptest::collection::vec((position, 1..=255u8), 1..4);
        runner(40)
            .run(&flips, |flips| {
                let mut bad = good.clone();
                for (at, mask) in &flips {
                    bad[*at] ^= mask;
                }
                if let Err(e) = runtime.compile(&bad) {
                    let e = format!("{e:#}");
                    prop_assert!(!e.contains('\n'), "one line: {e}");
                }
                Ok(())
            })
            .unwrap();
    }
}

#[test]
fn a_corrupt_file_is_named_in_its_error() {
    let runtime = Runtime::new(None).unwrap();
    let good = guest("uppercase");
    let dir = std::env::temp_dir().join(format!("percolator-runtime-malformed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("cut.wasm");
    std::fs::write(&file, &good[..good.len() / 2]).unwrap();
    let e = format!("{:#}", runtime.compile_file(&file).err().expect("a truncated file must be rejected"));
    assert!(e.starts_with(&format!("loading observer {}: ", file.display())), "{e}");
    assert!(e.contains("truncated or corrupt"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}
