//! CPU time from procfs, for the benchmarks' CPU-per-operation and `cores` figures. Shared
//! by `#[path]` between the benchmark binaries (`bench/src/bin/*`, `host-bench/src/bin/*`).

/// CPU seconds (user + system) used by process `pid` (`"self"`: this one), and by the children
/// it has reaped, from `/proc/<pid>/stat`; `None` if there is no such process (or no procfs).
pub(crate) fn cpu_seconds(pid: &str) -> Option<(f64, f64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may contain spaces) in parentheses.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    // In clock ticks of USER_HZ, which is 100 on Linux whatever the kernel's own tick rate.
    let tick = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).map(|t| t / 100.0);
    // utime, stime, cutime, cstime are fields 14–17 of the line: 11–14 after the name and state.
    Some((tick(11)? + tick(12)?, tick(13)? + tick(14)?))
}
