//! The webhook sink: each batch POSTed as JSON, `{"sink", "table", "changes": [...]}` (each
//! change as [`super::change_json`]), with an `Idempotency-Key` header of the sink's name and
//! the batch's first and last commit timestamps.
//!
//! A 2xx answer acknowledges the batch. Timeouts, connection errors, 5xx, 408 and 429 are
//! retried (the same batch, the same key). Any other 4xx refuses the batch for good: it is
//! parked as a dead letter of the sink, with the answer's text, and the sink moves on. A
//! receiver that applied a batch but whose answer was lost sees it again: it dedupes by the
//! key, or by `(row, column, commit_ts)`.

use std::time::Duration;

use super::{Batch, Deliver, Failure, change_json};

/// The longest answer text kept for an error.
const MAX_ANSWER: usize = 1024;

/// POSTs batches to a URL.
pub struct WebhookSink {
    url: String,
    agent: ureq::Agent,
}

impl WebhookSink {
    /// A sink POSTing to `url`; one attempt may take `timeout` in all.
    pub fn new(url: String, timeout: Duration) -> WebhookSink {
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .http_status_as_error(false)
            .max_redirects(0)
            .build()
            .new_agent();
        WebhookSink { url, agent }
    }
}

/// The `Idempotency-Key` of a batch: `<sink>-<first commit ts>-<last commit ts>`.
pub fn idempotency_key(batch: &Batch<'_>) -> String {
    let first = batch.changes.first().map_or(0, |c| c.commit_ts.raw());
    let last = batch.changes.last().map_or(0, |c| c.commit_ts.raw());
    format!("{}-{first}-{last}", batch.sink)
}

impl Deliver for WebhookSink {
    fn deliver(&mut self, batch: &Batch<'_>) -> Result<(), Failure> {
        let body = serde_json::json!({
            "sink": batch.sink,
            "table": batch.table,
            "changes": batch.changes.iter().map(change_json).collect::<Vec<_>>(),
        });
        let answer = self
            .agent
            .post(&self.url)
            .header("Idempotency-Key", &idempotency_key(batch))
            .header("Content-Type", "application/json")
            .send(body.to_string())
            .map_err(|e| Failure::Retry(format!("POST {}: {e}", self.url)))?;
        let status = answer.status().as_u16();
        if (200..300).contains(&status) {
            return Ok(());
        }
        let mut text = answer.into_body().read_to_string().unwrap_or_default();
        if text.len() > MAX_ANSWER {
            text.truncate(text.floor_char_boundary(MAX_ANSWER));
            text.push('…');
        }
        let msg = format!("POST {}: {status}: {}", self.url, text.trim());
        match status {
            408 | 429 => Err(Failure::Retry(msg)),
            400..=499 => Err(Failure::Reject(msg)),
            _ => Err(Failure::Retry(msg)),
        }
    }
}
