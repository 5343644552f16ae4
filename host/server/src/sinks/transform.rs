//! A sink's transform (`transform = "x.wasm"`): each batch read from the feed goes through the
//! component (`percolator-runtime`'s [`SinkTransform`], in the observers' sandbox) and what it
//! returns is delivered. A refused or failed batch is parked with its input changes, so a
//! retry transforms it again. `docs/design.md`, "Sink transforms".

use std::sync::Arc;

use percolator_runtime::{SinkTransform, TransformError};

use super::{Batch, Deliver, Failure};

/// A kind behind a transform.
pub struct Transformed {
    /// The destination.
    pub inner: Box<dyn Deliver>,
    /// The component.
    pub transform: Arc<SinkTransform>,
    /// The columns it may write (`outputs`): the destination's columns.
    pub outputs: Vec<String>,
}

impl Deliver for Transformed {
    fn deliver(&mut self, batch: &Batch<'_>) -> Result<(), Failure> {
        let out = self.transform.apply(batch.changes).map_err(|e| match e {
            // Slow now (a loaded machine) is not wrong: tried again.
            TransformError::Deadline { .. } => Failure::Retry(format!("transform: {e}")),
            // The same batch fails the same way again: parked, the sink goes on.
            e => Failure::Reject(format!("transform: {e}")),
        })?;
        if let Some(c) = out.iter().find(|c| !self.outputs.contains(&c.cell.column)) {
            return Err(Failure::Reject(format!(
                "transform: it returned a change of column {:?}, which is not one of the sink's outputs ({})",
                c.cell.column,
                self.outputs.join(", ")
            )));
        }
        if out.is_empty() {
            return Ok(()); // nothing to deliver: acknowledged as it is
        }
        self.inner.deliver(&Batch { sink: batch.sink, table: batch.table, columns: &self.outputs, changes: &out })
    }
}
