//! `percolator:sink/log`: a transform's logs go to the host's tracing output, under the sink's
//! name; a logged panic is kept for the batch's error.

use super::{PANIC_LOG_PREFIX, TransformState};
use crate::sink_bindings::percolator::sink::log::{Host, Level};

/// Longest guest log message kept; the rest is cut (a guest cannot flood the host's log).
const MAX_MESSAGE: usize = 4096;

impl Host for TransformState {
    fn log(&mut self, level: Level, message: String) {
        let message = if message.len() > MAX_MESSAGE {
            format!("{}… ({} bytes)", &message[..message.floor_char_boundary(MAX_MESSAGE)], message.len())
        } else {
            message
        };
        if level == Level::Error
            && let Some(panic) = message.strip_prefix(PANIC_LOG_PREFIX)
        {
            self.panic = Some(crate::runtime::panic_message(panic));
        }
        let sink = &*self.sink;
        match level {
            Level::Trace => tracing::trace!(sink, "{message}"),
            Level::Debug => tracing::debug!(sink, "{message}"),
            Level::Info => tracing::info!(sink, "{message}"),
            Level::Warn => tracing::warn!(sink, "{message}"),
            Level::Error => tracing::error!(sink, "{message}"),
        }
    }
}
