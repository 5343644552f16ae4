//! Snapshots across requests: the current timestamp, and pins that keep a snapshot from GC
//! (`snapshot`, `snapshot_renew`, `snapshot_release`). Reads at a snapshot are `get` and
//! `scan` with `at` (`cells.rs`).

use std::time::Duration;

use percolator_api::endpoint::{Snapshot, SnapshotRelease, SnapshotRenew};
use percolator_api::text::rfc3339;
use percolator_api::{
    ApiError, ApiResult, PinReleaseRequest, PinRenewRequest, PinReport, SnapshotReport, SnapshotRequest,
};
use percolator_store::{Pin, Timestamp};

use super::{Context, Op};

/// A pin as the API reports it.
pub fn pin_report(p: &Pin) -> PinReport {
    PinReport { id: p.id, ts: p.ts.raw(), expires: rfc3339(p.expires), expired: p.expired() }
}

impl Op for Snapshot {
    /// The current timestamp; with a TTL, a pin of it (or of `at`).
    fn run(cx: &Context, r: SnapshotRequest) -> ApiResult<SnapshotReport> {
        match (r.ttl_secs, r.at) {
            (None, Some(_)) => Err(ApiError::bad_input(
                "`at` names the snapshot to pin: give a TTL too (ttl_secs; `snapshot --at TS --ttl 10m`)",
            )),
            (None, None) => Ok(SnapshotReport { ts: cx.store.oracle().next()?.raw(), pin: None }),
            (Some(ttl), at) => {
                let pin = cx.store.pin_snapshot(at.map(Timestamp::from_raw), Duration::from_secs(ttl))?;
                Ok(SnapshotReport { ts: pin.ts.raw(), pin: Some(pin_report(&pin)) })
            }
        }
    }
}

impl Op for SnapshotRenew {
    /// Extends a pin to expire `ttl_secs` from now.
    fn run(cx: &Context, r: PinRenewRequest) -> ApiResult<PinReport> {
        Ok(pin_report(&cx.store.renew_pin(r.id, Duration::from_secs(r.ttl_secs))?))
    }
}

impl Op for SnapshotRelease {
    /// Releases a pin.
    fn run(cx: &Context, r: PinReleaseRequest) -> ApiResult<PinReport> {
        Ok(pin_report(&cx.store.unpin(r.id)?))
    }
}
