//! Observers written in JavaScript (componentize-js, built by `scripts/build-guests-js`) in a
//! host: the uppercase observer end to end with parameters, and a hostile guest bound once per
//! misbehaviour (its `mode` parameter) — a busy loop, a memory bomb, fetch(), an exception —
//! each contained with why it failed, while the host keeps serving; and the SDK's combine
//! (deltas of every kind, and refused ones) through the host.

#[path = "../../tests/common/mod.rs"]
mod common;

#[test]
fn a_javascript_observer_runs_with_its_parameters() {
    common::uppercase_runs_with_its_parameters("js-upper", "uppercase_js");
}

#[test]
fn javascript_combine_deltas_of_every_kind_reach_the_host() {
    common::combine_deltas_of_every_kind_reach_the_host("js-combine", "hostile_js");
}

#[test]
fn hostile_javascript_guests_are_contained_and_say_what_they_met() {
    let modes = [("spin", "timeout_ms = 300\n"), ("bomb", "memory_mb = 64\n"), ("fetch", ""), ("throw", "")];
    let (h, dead) = common::run_hostile_modes("js-hostile", "hostile_js", "uppercase_js", &modes, |_| {});
    let error = |o: &str| common::dead_letter_error(&dead, o);
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
