//! The one `bindgen!` of the observer world (`wit/observer.wit`).

wasmtime::component::bindgen!({
    path: "../../wit",
    world: "observer",
});

pub(crate) use percolator::observer::types::{Cell, Delta, Error as WitError, ScanEntry};
