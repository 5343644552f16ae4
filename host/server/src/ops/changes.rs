//! The change feed (`changes`): a page of committed changes after a position, waiting up to
//! `wait_secs` for a first one (`docs/design.md`, "The change feed").

use std::time::{Duration, Instant};

use percolator_api::endpoint::Changes;
use percolator_api::{ApiError, ApiResult, ChangeRecord, ChangesRequest, ChangesResponse, MAX_CHANGES_WAIT_SECS};
use percolator_store::{ChangeToken, MAX_CHANGES_PER_PAGE};

use super::{Context, Op, check_column, check_table};

/// How often a waiting `changes` looks again.
const POLL: Duration = Duration::from_millis(50);

impl Op for Changes {
    fn run(cx: &Context, r: ChangesRequest) -> ApiResult<ChangesResponse> {
        check_table(&r.table)?;
        for c in r.columns.iter().flatten() {
            check_column(c)?;
        }
        if r.columns.as_ref().is_some_and(Vec::is_empty) {
            return Err(ApiError::bad_input("columns is empty (leave it out for every logged column)"));
        }
        if !(1..=MAX_CHANGES_PER_PAGE).contains(&r.limit) {
            return Err(ApiError::bad_input(format!("limit {} is not between 1 and {MAX_CHANGES_PER_PAGE}", r.limit)));
        }
        if !(0.0..=MAX_CHANGES_WAIT_SECS).contains(&r.wait_secs) {
            return Err(ApiError::bad_input(format!(
                "wait_secs {} is not between 0 and {MAX_CHANGES_WAIT_SECS}",
                r.wait_secs
            )));
        }
        let mut since: ChangeToken = match &r.since {
            None => ChangeToken::origin(),
            Some(s) => s.parse().map_err(|e: percolator_store::Error| ApiError::bad_input(e.to_string()))?,
        };
        let deadline = Instant::now() + Duration::from_secs_f64(r.wait_secs);
        loop {
            let page = cx.store.changes(&r.table, r.columns.as_deref(), &since, r.limit)?;
            let stopping = cx.host.as_ref().is_some_and(|h| *h.shutdown.borrow());
            if !page.changes.is_empty() || page.more || Instant::now() >= deadline || stopping {
                return Ok(ChangesResponse {
                    changes: page.changes.iter().map(ChangeRecord::of).collect(),
                    next: page.next.to_string(),
                    more: page.more,
                });
            }
            since = page.next;
            std::thread::sleep(POLL.min(deadline.saturating_duration_since(Instant::now())));
        }
    }
}
