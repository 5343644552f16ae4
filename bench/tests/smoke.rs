//! The benchmark's quick plan runs to its end and prints its figures: `percolator-bench
//! --quick`, the smoke run of `scripts/test`, here from the tests' own build (a release build
//! of its own cost the test run minutes of compiling for a run of seconds). Its figures are
//! not checked: a debug build says nothing about speed.

use std::process::Command;

#[test]
fn the_quick_plan_runs_to_its_end() {
    let out = Command::new(env!("CARGO_BIN_EXE_percolator-bench")).arg("--quick").output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "percolator-bench --quick failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.lines().any(|l| l.starts_with("bench_seconds ")), "no bench_seconds line in:\n{stdout}");
}
