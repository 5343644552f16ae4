//! `/metrics`: the store's counters, the observers' runs and the pipeline's gauges in the
//! Prometheus text exposition format (version 0.0.4).

use std::fmt::Write;

use percolator_api::ApiResult;
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
    e.family("percolator_observer_runs_total", "counter", "Runs of the observer's component.");
    for x in b {
        e.sample("percolator_observer_runs_total", &[("observer", &x.name)], x.counts.runs);
    }
    e.family(
        "percolator_observer_failures_total",
        "counter",
        "Failed runs of the observer (trap, deadline, error, denied access).",
    );
    for x in b {
        e.sample("percolator_observer_failures_total", &[("observer", &x.name)], x.counts.failures);
    }
    e.family("percolator_observer_run_seconds", "summary", "Wall-clock time of the observer's runs.");
    for x in b {
        e.sample("percolator_observer_run_seconds_sum", &[("observer", &x.name)], x.counts.run_time.as_secs_f64());
        e.sample("percolator_observer_run_seconds_count", &[("observer", &x.name)], x.counts.runs);
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
    Ok(e.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
