//! `/metrics`: the store's counters, the observers' runs and the pipeline's gauges in the
//! Prometheus text exposition format (version 0.0.4).

use std::fmt::Write;

use percolator_api::{ApiResult, Histogram};
use percolator_runtime::{RUN_TIME_BUCKETS, RunCounts};
use percolator_store::Store;

use crate::ops::{self, HostContext};

/// Escapes a label value: backslash, double quote and newline.
pub fn escape_label(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

struct Exposition(String);

impl Exposition {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.0, "# HELP {name} {help}");
        let _ = writeln!(self.0, "# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl std::fmt::Display) {
        self.0.push_str(name);
        if !labels.is_empty() {
            self.0.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.0.push(',');
                }
                let _ = write!(self.0, "{k}=\"{}\"", escape_label(v));
            }
            self.0.push('}');
        }
        let _ = writeln!(self.0, " {value}");
    }

    fn single(&mut self, name: &str, kind: &str, help: &str, value: impl std::fmt::Display) {
        self.family(name, kind, help);
        self.sample(name, &[], value);
    }
}

/// One observer's run times as the series of a Prometheus histogram: cumulative `_bucket`s
/// at [`RUN_TIME_BUCKETS`] and `+Inf`, `_sum`, and `_count` (the `+Inf` bucket's value, so the
/// series agree even while runs are being recorded). Like the runs and failures counters,
/// the histogram is over the store's life (saved and continued across restarts; runs saved by
/// a version that did not save it are in no bucket).
fn run_time_histogram(e: &mut Exposition, observer: &str, counts: &RunCounts) {
    let name = "percolator_observer_run_seconds";
    let mut cumulative = 0;
    for (i, n) in counts.buckets.iter().enumerate() {
        cumulative += n;
        let le = RUN_TIME_BUCKETS.get(i).map(|b| b.as_secs_f64().to_string()).unwrap_or_else(|| "+Inf".into());
        e.sample(&format!("{name}_bucket"), &[("observer", observer), ("le", &le)], cumulative);
    }
    e.sample(&format!("{name}_sum"), &[("observer", observer)], counts.histogram_run_time.as_secs_f64());
    e.sample(&format!("{name}_count"), &[("observer", observer)], cumulative);
}

/// A histogram of the API (`status`) as the series of a Prometheus histogram: the same
/// numbers, so the dashboard and `/metrics` agree.
fn histogram(e: &mut Exposition, name: &str, observer: &str, h: &Histogram) {
    for (i, n) in h.cumulative.iter().enumerate() {
        let le = h.le_secs.get(i).map(f64::to_string).unwrap_or_else(|| "+Inf".into());
        e.sample(&format!("{name}_bucket"), &[("observer", observer), ("le", &le)], n);
    }
    e.sample(&format!("{name}_sum"), &[("observer", observer)], h.sum_secs);
    e.sample(&format!("{name}_count"), &[("observer", observer)], h.cumulative.last().copied().unwrap_or(0));
}

/// The host's metrics in the Prometheus text format.
pub fn render(store: &Store, host: &HostContext) -> ApiResult<String> {
    let m = store.metrics();
    let status = host.pipeline.status();
    let backlog = ops::backlog(store)?;
    let dead = store.dead_letters()?.len();
    let mut e = Exposition(String::new());
    // The store's counters, named after the store's own list: `percolator_store_<name>_total`.
    for c in m.counters() {
        let name = format!("percolator_store_{}_total", c.name);
        e.single(&name, "counter", c.help, c.value);
    }
    let b = &status.bindings;
    e.family(
        "percolator_observer_runs_total",
        "counter",
        "Runs of the observer's component, over the store's life (kept across restarts).",
    );
    for x in b {
        e.sample("percolator_observer_runs_total", &[("observer", &x.name)], x.counts.runs);
    }
    e.family(
        "percolator_observer_committed_total",
        "counter",
        "Runs of the observer that committed (runs = committed + conflicts + failures), over the store's life.",
    );
    for x in b {
        e.sample("percolator_observer_committed_total", &[("observer", &x.name)], x.settled.committed);
    }
    e.family(
        "percolator_observer_conflicts_total",
        "counter",
        "Runs of the observer lost to a conflict (run again after a backoff; not failures), over the store's life.",
    );
    for x in b {
        e.sample("percolator_observer_conflicts_total", &[("observer", &x.name)], x.settled.lost_to_conflict);
    }
    e.family(
        "percolator_observer_successes_total",
        "counter",
        "Runs of the observer that committed: the same as percolator_observer_committed_total (kept for old dashboards).",
    );
    for x in b {
        e.sample("percolator_observer_successes_total", &[("observer", &x.name)], x.settled.committed);
    }
    e.family(
        "percolator_observer_failures_total",
        "counter",
        "Failed runs of the observer (trap, deadline, error, denied access), over the store's life.",
    );
    for x in b {
        e.sample("percolator_observer_failures_total", &[("observer", &x.name)], x.counts.failures);
    }
    e.family(
        "percolator_observer_run_cpu_seconds_total",
        "counter",
        "CPU time of the observer's runs (its thread's, from taking an instance to putting it back: the guest, its reads and writes; not the commit), over the store's life.",
    );
    for x in b {
        e.sample(
            "percolator_observer_run_cpu_seconds_total",
            &[("observer", &x.name)],
            x.counts.cpu_time.as_secs_f64(),
        );
    }
    e.family(
        "percolator_observer_run_seconds",
        "histogram",
        "Wall-clock time of the observer's runs, over the store's life (kept across restarts).",
    );
    for x in b {
        run_time_histogram(&mut e, &x.name, &x.counts);
    }
    let freshness = store.freshness();
    e.family(
        "percolator_observer_freshness_seconds",
        "histogram",
        "Time from the commit of a change to the commit of the observer run that consumed it, since the host started.",
    );
    for x in b {
        let f = freshness.get(&x.name).copied().unwrap_or_default();
        histogram(&mut e, "percolator_observer_freshness_seconds", &x.name, &ops::pipeline::freshness_histogram(&f));
    }
    e.family(
        "percolator_observer_freshness_untimed_total",
        "counter",
        "Committed runs since the host started on changes older than its samples of the oracle (not in the histogram).",
    );
    for x in b {
        let untimed = freshness.get(&x.name).map_or(0, |f| f.untimed);
        e.sample("percolator_observer_freshness_untimed_total", &[("observer", &x.name)], untimed);
    }
    e.family("percolator_backlog", "gauge", "Pending notifications of the observer's column.");
    for x in b {
        e.sample("percolator_backlog", &[("observer", &x.name)], backlog.of(&x.table, &x.column));
    }
    e.single(
        "percolator_pending_notifications",
        "gauge",
        &format!("Pending notify cells (counted up to {}).", ops::BACKLOG_CAP),
        backlog.total,
    );
    e.single("percolator_dead_letters", "gauge", "Dead letters waiting for a retry.", dead);
    if let Some(size) = store.size_on_disk() {
        e.single("percolator_store_size_bytes", "gauge", "Bytes the store takes on disk (the redb file).", size);
    }
    e.single(
        "percolator_store_read_only",
        "gauge",
        "1 while the store refuses writes (the disk is full, an I/O error; status says why), else 0.",
        u64::from(store.storage_failure().is_some()),
    );
    e.single(
        "percolator_notify_buckets",
        "gauge",
        "Partitions (buckets) of the notify group that the hosts' scanners share out.",
        store.notify_partitions(),
    );
    e.family(
        "percolator_worker_notify_buckets",
        "gauge",
        "Live workers of the store (hosts; command lines that opened it) and the notify buckets each one's scanners walk.",
    );
    for w in store.workers()? {
        let id = w.id.to_string();
        let this = if w.this { "true" } else { "false" };
        e.sample("percolator_worker_notify_buckets", &[("worker", &id), ("this", this)], w.partitions.len());
    }
    e.single(
        "percolator_pipeline_generation",
        "gauge",
        "Successful pipeline loads (1 after start-up).",
        status.generation,
    );
    e.single(
        "percolator_pipeline_last_reload_failed",
        "gauge",
        "1 if the last reload was rejected.",
        u8::from(status.last_error.is_some()),
    );
    if let Some(sinks) = host.pipeline.sinks() {
        sink_metrics(&mut e, &sinks.status());
    }
    Ok(e.0)
}

/// A sink's series: name, type, help, and its value for one sink (none: not known).
type SinkFamily<'a> = (&'a str, &'a str, &'a str, &'a dyn Fn(&crate::sinks::SinkStatus) -> Option<f64>);

/// The sinks' series, labelled by sink.
fn sink_metrics(e: &mut Exposition, sinks: &[crate::sinks::SinkStatus]) {
    let families: [SinkFamily<'_>; 6] = [
        (
            "percolator_sink_delivered_total",
            "counter",
            "Changes the sink delivered (acknowledged) since the host started.",
            &|s| Some(s.delivered as f64),
        ),
        (
            "percolator_sink_position",
            "gauge",
            "The sink's position: every change committed at or below this timestamp is delivered.",
            &|s| s.position.map(|p| p.raw() as f64),
        ),
        (
            "percolator_sink_lag_seconds",
            "gauge",
            "Seconds since the sink last found nothing new to deliver (0: caught up).",
            &|s| s.lag.map(|d| d.as_secs_f64()),
        ),
        ("percolator_sink_owner", "gauge", "1 if this host owns the sink's subscription (and so delivers).", &|s| {
            Some(f64::from(u8::from(s.owner)))
        }),
        ("percolator_sink_failures", "gauge", "Failed delivery attempts since the sink's last success.", &|s| {
            Some(s.failures as f64)
        }),
        ("percolator_sink_dead_letters", "gauge", "Batches the sink's destination refused, parked.", &|s| {
            Some(s.dead_letters.len() as f64)
        }),
    ];
    for (name, kind, help, value) in families {
        e.family(name, kind, help);
        for s in sinks {
            if let Some(v) = value(s) {
                e.sample(name, &[("sink", &s.name), ("kind", s.kind)], v);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_times_are_a_cumulative_histogram() {
        // Runs saved by a version without the histogram count in `run_time`, not in it.
        let mut counts = RunCounts {
            run_time: std::time::Duration::from_secs(100),
            histogram_run_time: std::time::Duration::from_millis(1500),
            ..RunCounts::default()
        };
        counts.buckets[0] = 2; // ≤ 50 µs
        counts.buckets[4] = 3; // ≤ 1 ms
        counts.buckets[RUN_TIME_BUCKETS.len()] = 1; // over 60 s
        let mut e = Exposition(String::new());
        run_time_histogram(&mut e, "upper", &counts);
        let lines: Vec<&str> = e.0.lines().collect();
        assert_eq!(lines.len(), RUN_TIME_BUCKETS.len() + 3);
        assert_eq!(lines[0], "percolator_observer_run_seconds_bucket{observer=\"upper\",le=\"0.00005\"} 2");
        assert_eq!(lines[3], "percolator_observer_run_seconds_bucket{observer=\"upper\",le=\"0.0005\"} 2");
        assert_eq!(lines[4], "percolator_observer_run_seconds_bucket{observer=\"upper\",le=\"0.001\"} 5");
        assert_eq!(lines[18], "percolator_observer_run_seconds_bucket{observer=\"upper\",le=\"60\"} 5");
        assert_eq!(lines[19], "percolator_observer_run_seconds_bucket{observer=\"upper\",le=\"+Inf\"} 6");
        assert_eq!(lines[20], "percolator_observer_run_seconds_sum{observer=\"upper\"} 1.5");
        assert_eq!(lines[21], "percolator_observer_run_seconds_count{observer=\"upper\"} 6");
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
