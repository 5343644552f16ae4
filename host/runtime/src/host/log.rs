//! `percolator:observer/log`: guest logs go to the host's tracing output.

use super::HostState;
use crate::bindings::percolator::observer::log::{Host, Level};

/// Longest guest log message kept; the rest is cut (a guest cannot flood the host's log).
const MAX_MESSAGE: usize = 4096;

impl Host for HostState {
    fn log(&mut self, level: Level, message: String) {
        let message = if message.len() > MAX_MESSAGE {
            format!("{}… ({} bytes)", &message[..message.floor_char_boundary(MAX_MESSAGE)], message.len())
        } else {
            message
        };
        let observer = &*self.observer;
        match level {
            Level::Trace => tracing::trace!(observer, "{message}"),
            Level::Debug => tracing::debug!(observer, "{message}"),
            Level::Info => tracing::info!(observer, "{message}"),
            Level::Warn => tracing::warn!(observer, "{message}"),
            Level::Error => tracing::error!(observer, "{message}"),
        }
    }
}
