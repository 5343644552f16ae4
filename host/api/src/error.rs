//! The error of every command: a kind (which picks the HTTP status) and a message for people.

use std::fmt;

/// What kind of failure an [`ApiError`] is (it picks the HTTP status).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The request is wrong (400).
    BadInput,
    /// The thing asked for does not exist (404).
    NotFound,
    /// A missing or wrong token (401).
    Unauthorized,
    /// Lost a race too many times (409); running it again may succeed.
    Conflict,
    /// The store failed (500).
    Store,
    /// The host cannot serve it: it could not be reached (client side), or it is shutting
    /// down (503).
    Unavailable,
}

impl ErrorKind {
    /// The HTTP status a host answers for this kind.
    pub fn http_status(self) -> u16 {
        match self {
            ErrorKind::BadInput => 400,
            ErrorKind::NotFound => 404,
            ErrorKind::Unauthorized => 401,
            ErrorKind::Conflict => 409,
            ErrorKind::Unavailable => 503,
            ErrorKind::Store => 500,
        }
    }

    /// The kind of an HTTP error status (what a client makes of a host's answer).
    pub fn of_http_status(status: u16) -> ErrorKind {
        match status {
            400 | 405 | 413 | 415 | 422 => ErrorKind::BadInput,
            401 | 403 => ErrorKind::Unauthorized,
            404 => ErrorKind::NotFound,
            409 => ErrorKind::Conflict,
            503 => ErrorKind::Unavailable,
            _ => ErrorKind::Store,
        }
    }
}

/// The error of every command: a kind and a complete message (printed as is).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiError {
    /// What kind.
    pub kind: ErrorKind,
    /// What went wrong, complete.
    pub message: String,
}

/// Result of a command.
pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    /// An error of `kind`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> ApiError {
        ApiError { kind, message: message.into() }
    }

    /// A bad-input error.
    pub fn bad_input(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorKind::BadInput, message)
    }

    /// A not-found error.
    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorKind::NotFound, message)
    }

    /// The host cannot serve the request (it is shutting down, or unreachable).
    pub fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorKind::Unavailable, message)
    }

    /// A store error.
    pub fn store(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorKind::Store, message)
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ApiError {}

impl From<ApiError> for String {
    fn from(e: ApiError) -> String {
        e.message
    }
}

impl From<percolator_store::Error> for ApiError {
    fn from(e: percolator_store::Error) -> ApiError {
        use percolator_store::Error as E;
        let kind = match e {
            // The message alone (`table name is empty`), without the error's kind.
            E::InvalidArgument(m) => return ApiError::bad_input(m),
            E::NotFound(_) => ErrorKind::NotFound,
            E::Conflict { .. } => ErrorKind::Conflict,
            E::Unavailable(_) => ErrorKind::Unavailable,
            E::SnapshotTooOld { .. } => ErrorKind::BadInput,
            _ => ErrorKind::Store,
        };
        ApiError { kind, message: e.to_string() }
    }
}
