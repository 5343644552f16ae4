//! Helpers shared by the integration tests: the workspace's test kit, and what depends on this
//! crate's own `failpoints` feature.
#![allow(dead_code, unreachable_pub, missing_docs, unused_imports)]

pub use percolator_testkit::*;

/// For a test that sets no failpoint, in a test binary where others do: failpoints are global,
/// so it holds the failpoint scenario's lock, and another test's failpoint cannot fire in it.
#[cfg(feature = "failpoints")]
pub fn no_failpoints() -> fail::FailScenario<'static> {
    fail::FailScenario::setup()
}

/// Without the feature there are no failpoints to keep out.
#[cfg(not(feature = "failpoints"))]
pub fn no_failpoints() -> NoFailpoints {
    NoFailpoints
}

/// What [`no_failpoints`] holds without the feature: nothing.
#[cfg(not(feature = "failpoints"))]
pub struct NoFailpoints;
