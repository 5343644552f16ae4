//! The percolator host's API, as any client sees it: the request and answer types, one
//! description per command ([`endpoint`]), the error of every command ([`ApiError`]), the HTTP
//! client ([`Remote`]), the API's OpenAPI description ([`openapi`]) and the reading of load
//! files ([`loadfile`]).
//!
//! A command is an [`Endpoint`]: its method, path, request and answer types. A running host
//! serves every endpoint of [`endpoint::ALL`]; the command line and applications (the web
//! index's `webindex` binary) call them with [`Remote::call`]:
//!
//! ```no_run
//! use percolator_api::{Remote, ScanRequest, endpoint};
//!
//! let host = Remote::new("http://127.0.0.1:7878", None);
//! let page = host.call::<endpoint::Scan>(&ScanRequest { table: "pages".into(), ..Default::default() })?;
//! for cell in &page.cells {
//!     println!("{}\t{}\t{}", cell.row, cell.column, cell.value);
//! }
//! // More? Ask for the next page with `after: page.next`.
//! # Ok::<(), percolator_api::ApiError>(())
//! ```

mod client;
pub mod endpoint;
mod error;
pub mod loadfile;
pub mod openapi;
pub mod text;
mod types;

pub use client::Remote;
pub use endpoint::{Empty, Endpoint, Method};
pub use error::{ApiError, ApiResult, ErrorKind};
pub use types::*;
