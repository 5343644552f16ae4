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

/// CPU seconds of this process's live threads, summed by thread name (`/proc/self/task/*/`:
/// `comm`, at most 15 bytes, and `stat`). Threads that have exited are not counted.
#[allow(dead_code)] // not every benchmark binary that includes this file uses it
pub(crate) fn thread_cpu_by_name() -> std::collections::BTreeMap<String, f64> {
    let mut out = std::collections::BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return out };
    for task in tasks.flatten() {
        let tid = task.file_name().to_string_lossy().into_owned();
        let Ok(name) = std::fs::read_to_string(task.path().join("comm")) else { continue };
        if let Some((cpu, _)) = cpu_seconds(&format!("self/task/{tid}")) {
            *out.entry(name.trim().to_owned()).or_insert(0.0) += cpu;
        }
    }
    out
}

/// Bytes this process's live threads passed to write calls (`wchar` of `/proc/self/task/*/io`:
/// what they asked to write, to files and pipes, whether or not the page cache had it on disk
/// yet), summed by thread name. Threads that have exited are not counted.
#[allow(dead_code)] // not every benchmark binary that includes this file uses it
pub(crate) fn thread_written_by_name() -> std::collections::BTreeMap<String, u64> {
    let mut out = std::collections::BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return out };
    for task in tasks.flatten() {
        let Ok(name) = std::fs::read_to_string(task.path().join("comm")) else { continue };
        let Ok(io) = std::fs::read_to_string(task.path().join("io")) else { continue };
        let written = io.lines().find_map(|l| l.strip_prefix("wchar:")).and_then(|v| v.trim().parse::<u64>().ok());
        if let Some(written) = written {
            *out.entry(name.trim().to_owned()).or_insert(0) += written;
        }
    }
    out
}
