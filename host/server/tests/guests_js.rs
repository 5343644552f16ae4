//! Observers written in JavaScript (componentize-js, built by `scripts/build-guests-js`) in a
//! host: the uppercase observer end to end with parameters, and a hostile guest bound once per
//! misbehaviour (its `mode` parameter) — a busy loop, a memory bomb, fetch(), an exception —
//! each contained with why it failed, while the host keeps serving.

use std::time::Duration;

#[path = "../../tests/common/mod.rs"]
mod common;

const QUIET: Duration = Duration::from_secs(120);

fn binding(name: &str, wasm: &str, column: &str, extra: &str) -> String {
    format!("\n[[binding]]\nname = \"{name}\"\nwasm = \"{wasm}\"\ntable = \"docs\"\ncolumn = \"{column}\"\n{extra}")
}

fn hostile(mode: &str, extra: &str) -> String {
    binding(
        mode,
        "hostile.wasm",
        &format!("in:{mode}"),
        &format!("writes = [\"docs/out:{mode}\"]\nmax_attempts = 1\n{extra}[binding.params]\nmode = \"{mode}\"\n"),
    )
}

#[test]
fn a_javascript_observer_runs_with_its_parameters() {
    let h = common::start_cached(
        "js-upper",
        &[("upper.wasm", "uppercase_js")],
        &(binding("upper", "upper.wasm", "raw:text", "writes = [\"docs/derived:upper\"]\n")
            + &binding(
                "shout",
                "upper.wasm",
                "raw:text",
                "writes = [\"docs/derived:shout\"]\n[binding.params]\ntarget = \"derived:shout\"\n",
            )),
        2,
    );
    for i in 0..10 {
        h.store.run(|t| t.set("docs", format!("r{i}"), "raw:text", format!("hello {i}"))).unwrap();
    }
    h.store.run(|t| t.set("docs", "bad", "raw:text", vec![0xff, 0xfe])).unwrap();
    assert!(h.store.wait_quiescent(QUIET).unwrap());
    let t = h.store.begin().unwrap();
    for i in 0..10 {
        assert_eq!(t.get("docs", format!("r{i}"), "derived:upper").unwrap(), Some(format!("HELLO {i}").into_bytes()));
        assert_eq!(t.get("docs", format!("r{i}"), "derived:shout").unwrap(), Some(format!("HELLO {i}").into_bytes()));
    }
    let dead = h.store.dead_letters().unwrap();
    assert_eq!(dead.len(), 2, "{dead:?}");
    assert!(dead.iter().all(|d| d.error.contains("docs/bad/raw:text is not UTF-8")), "{dead:?}");
}

#[test]
fn hostile_javascript_guests_are_contained_and_say_what_they_met() {
    let h = common::start_cached(
        "js-hostile",
        &[("hostile.wasm", "hostile_js"), ("upper.wasm", "uppercase_js")],
        &(hostile("spin", "timeout_ms = 300\n")
            + &hostile("bomb", "memory_mb = 64\n")
            + &hostile("fetch", "")
            + &hostile("throw", "")
            + &binding("upper", "upper.wasm", "raw:text", "writes = [\"docs/derived:upper\"]\n")),
        2,
    );
    for mode in ["spin", "bomb", "fetch", "throw"] {
        h.store.run(|t| t.set("docs", "r1", &format!("in:{mode}"), "go")).unwrap();
    }
    h.store.run(|t| t.set("docs", "healthy", "raw:text", "still serving")).unwrap();
    assert!(h.store.wait_quiescent(QUIET).unwrap());
    let dead = h.store.dead_letters().unwrap();
    let error = |o: &str| {
        dead.iter()
            .find(|d| d.observer == o)
            .map(|d| d.error.clone())
            .unwrap_or_else(|| panic!("no dead letter of {o}: {dead:?}"))
    };
    assert!(error("spin").contains("deadline of 300 ms exceeded"), "{}", error("spin"));
    // SpiderMonkey gives up on its own out-of-memory with an `unreachable` trap and no message
    // (when the cap refused a growth first, the host says so): contained either way.
    let bomb = error("bomb");
    assert!(bomb.contains("memory limit of 64 MiB") || bomb.contains("unreachable"), "{bomb}");
    // Built without wasi:http, StarlingMonkey's fetch() aborts the runtime: a trap, no request.
    assert!(error("fetch").contains("unreachable"), "{}", error("fetch"));
    assert!(error("throw").contains("TypeError"), "{}", error("throw"));
    let t = h.store.begin().unwrap();
    for mode in ["spin", "bomb", "fetch", "throw"] {
        assert_eq!(t.get("docs", "r1", &format!("out:{mode}")).unwrap(), None, "{mode} wrote nothing");
    }
    assert_eq!(t.get("docs", "healthy", "derived:upper").unwrap(), Some(b"STILL SERVING".to_vec()));
    assert_eq!(dead.len(), 4, "{dead:?}");
}
