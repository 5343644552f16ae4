//! A sink's parked batches (those its destination refused): sent again or discarded.

use percolator_api::endpoint::SinkDeadLetter;
use percolator_api::{ApiError, ApiResult, SinkDeadLetterAction, SinkDeadLetterRequest, SinkDeadLetterResponse};

use super::{Context, Op};
use crate::sinks::DeadLetterError;

impl Op for SinkDeadLetter {
    const WRITES: bool = true;

    /// Only a running host has sinks: without one the batch files stay where they are.
    fn run(cx: &Context, r: SinkDeadLetterRequest) -> ApiResult<SinkDeadLetterResponse> {
        let sinks = cx.host.as_ref().and_then(|h| h.pipeline.sinks().cloned()).ok_or_else(|| {
            ApiError::unavailable("sinks run in a host: start `percolator up` to retry or discard a parked batch")
        })?;
        let retry = r.action == SinkDeadLetterAction::Retry;
        match sinks.dead_letter(&r.sink, &r.id, retry) {
            Ok(changes) => Ok(SinkDeadLetterResponse { removed: true, changes: changes as u64 }),
            Err(DeadLetterError::NotFound(m)) => Err(ApiError::not_found(m)),
            Err(DeadLetterError::Failed(m)) => Err(ApiError::unavailable(m)),
        }
    }
}
