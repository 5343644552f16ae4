//! The error type of every transaction operation and of an observer run.

use std::fmt;

/// Shorthand for results whose error is [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why an operation or an observer run failed; mirrors the WIT `error` variant one to one.
///
/// Every [`Txn`](crate::Txn) method returns it, so `?` propagates host errors unchanged — which
/// is what the host wants for [`Error::Conflict`] (it retries the run with a fresh snapshot).
/// Use [`Error::failed`] for the observer's own failures.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Error {
    /// The transaction lost a race; the host retries the run with a new snapshot. Return it
    /// from `observe` unchanged.
    Conflict(String),
    /// A named thing does not exist.
    NotFound(String),
    /// The binding does not allow this access (a column outside its declared reads or writes).
    Denied(String),
    /// An unusable argument (empty or over-long name, reserved column, write to a weak-notify
    /// column).
    InvalidArgument(String),
    /// The store failed; the run is retried later.
    Storage(String),
    /// The observer's own failure, with its message; counts towards dead-lettering.
    Failed(String),
}

impl Error {
    /// The observer's own failure ([`Error::Failed`]) with a message.
    pub fn failed(message: impl Into<String>) -> Error {
        Error::Failed(message.into())
    }

    /// The message carried by any kind.
    pub fn message(&self) -> &str {
        match self {
            Error::Conflict(m)
            | Error::NotFound(m)
            | Error::Denied(m)
            | Error::InvalidArgument(m)
            | Error::Storage(m)
            | Error::Failed(m) => m,
        }
    }

    /// The WIT name of the kind (`conflict`, `not-found`, …).
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Conflict(_) => "conflict",
            Error::NotFound(_) => "not-found",
            Error::Denied(_) => "denied",
            Error::InvalidArgument(_) => "invalid-argument",
            Error::Storage(_) => "storage",
            Error::Failed(_) => "failed",
        }
    }

    /// True for [`Error::Conflict`], the kind the host retries without counting a failure.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Conflict(_))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind(), self.message())
    }
}

impl std::error::Error for Error {}

impl From<std::str::Utf8Error> for Error {
    fn from(e: std::str::Utf8Error) -> Error {
        Error::Failed(format!("value is not UTF-8: {e}"))
    }
}

impl From<std::string::FromUtf8Error> for Error {
    fn from(e: std::string::FromUtf8Error) -> Error {
        Error::Failed(format!("value is not UTF-8: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_the_kind() {
        assert_eq!(Error::Conflict("row r".into()).to_string(), "conflict: row r");
        assert_eq!(Error::InvalidArgument("x".into()).kind(), "invalid-argument");
        assert_eq!(Error::failed("boom").message(), "boom");
        assert!(Error::Conflict(String::new()).is_conflict());
        assert!(!Error::Storage(String::new()).is_conflict());
    }

    #[test]
    fn utf8_errors_become_failed() {
        let e: Error = String::from_utf8(vec![0xff]).unwrap_err().into();
        assert!(matches!(e, Error::Failed(_)));
    }
}
