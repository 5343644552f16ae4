//! Observers written in Python (componentize-py, built by `scripts/build-guests-python`) in a
//! host: the uppercase observer end to end with parameters, and a hostile guest bound once per
//! misbehaviour (its `mode` parameter) — a busy loop, a memory bomb, a file, a socket, the
//! environment, the clock and randomness, an exception — each contained, with what it saw or
//! why it failed, while the host keeps serving.

use std::time::Duration;

#[path = "../../tests/common/mod.rs"]
mod common;

const QUIET: Duration = Duration::from_secs(120);

#[test]
fn a_python_observer_runs_with_its_parameters() {
    common::uppercase_runs_with_its_parameters("python-upper", "uppercase_py");
}

#[test]
fn hostile_python_guests_are_contained_and_say_what_they_met() {
    let h = common::start_cached(
        "py-hostile",
        &[("hostile.wasm", "hostile_py"), ("upper.wasm", "uppercase_py")],
        &(common::hostile_binding("spin", "timeout_ms = 300\n")
            + &common::hostile_binding("bomb", "memory_mb = 64\n")
            + &common::hostile_binding("file", "")
            + &common::hostile_binding("socket", "")
            + &common::hostile_binding("env", "")
            + &common::hostile_binding("clock", "clock = \"fixed\"\nrandom_seed = 7\n")
            + &common::hostile_binding("raise", "")
            + &common::docs_binding("upper", "upper.wasm", "raw:text", "writes = [\"docs/derived:upper\"]\n")),
        2,
    );
    for mode in ["spin", "bomb", "file", "socket", "env", "clock", "raise"] {
        h.store.run(|t| t.set("docs", "r1", &format!("in:{mode}"), "go")).unwrap();
    }
    h.store.run(|t| t.set("docs", "r2", "in:clock", "again")).unwrap();
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
    assert!(error("bomb").contains("memory limit of 64 MiB"), "{}", error("bomb"));
    // No folder is preopened: the open fails inside the guest, which sees an OSError.
    assert!(error("file").contains("Error") && error("file").contains("/etc/passwd"), "{}", error("file"));
    assert!(error("socket").contains("Error"), "{}", error("socket"));
    // The exception's message and the guest's own stderr line reach the dead letter.
    let raised = error("raise");
    assert!(raised.contains("ZeroDivisionError: division by zero"), "{raised}");
    assert!(raised.contains("about to divide"), "stderr is carried: {raised}");
    let t = h.store.begin().unwrap();
    let text = |row: &str, col: &str| String::from_utf8(t.get("docs", row, col).unwrap().unwrap()).unwrap();
    assert_eq!(text("r1", "out:env"), r#"{"environ": {}, "argv": []}"#);
    // Fixed clock and seeded randomness: two runs see the same time and the same bytes.
    assert_eq!(text("r1", "out:clock"), text("r2", "out:clock"));
    assert!(text("r1", "out:clock").starts_with(r#"{"time": 946684800.0"#), "{}", text("r1", "out:clock"));
    for mode in ["spin", "bomb", "file", "socket", "raise"] {
        assert_eq!(t.get("docs", "r1", &format!("out:{mode}")).unwrap(), None, "{mode} wrote nothing");
    }
    assert_eq!(t.get("docs", "healthy", "derived:upper").unwrap(), Some(b"STILL SERVING".to_vec()));
    assert_eq!(dead.len(), 5, "{dead:?}");
}
