//! Logging into the host's tracing output (a guest has no stdout).
//!
//! Inside a Wasm guest these call the WIT `log` import; natively (unit tests) they print to
//! stderr, which the test harness captures.

use std::fmt;

/// Severity of a log message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// Very verbose.
    Trace,
    /// For debugging.
    Debug,
    /// Normal operation.
    Info,
    /// Something unexpected but handled.
    Warn,
    /// A failure.
    Error,
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Level::Trace => "TRACE",
            Level::Debug => "DEBUG",
            Level::Info => "INFO",
            Level::Warn => "WARN",
            Level::Error => "ERROR",
        })
    }
}

/// Logs `message` at `level`.
pub fn log(level: Level, message: &str) {
    #[cfg(target_arch = "wasm32")]
    {
        use crate::bindings::percolator::observer::log as wit;
        let level = match level {
            Level::Trace => wit::Level::Trace,
            Level::Debug => wit::Level::Debug,
            Level::Info => wit::Level::Info,
            Level::Warn => wit::Level::Warn,
            Level::Error => wit::Level::Error,
        };
        wit::log(level, message);
    }
    #[cfg(not(target_arch = "wasm32"))]
    eprintln!("[{level}] {message}");
}

/// Logs at [`Level::Trace`].
pub fn trace(message: &str) {
    log(Level::Trace, message)
}

/// Logs at [`Level::Debug`].
pub fn debug(message: &str) {
    log(Level::Debug, message)
}

/// Logs at [`Level::Info`].
pub fn info(message: &str) {
    log(Level::Info, message)
}

/// Logs at [`Level::Warn`].
pub fn warn(message: &str) {
    log(Level::Warn, message)
}

/// Logs at [`Level::Error`].
pub fn error(message: &str) {
    log(Level::Error, message)
}
