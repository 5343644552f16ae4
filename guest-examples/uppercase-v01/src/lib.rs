//! `uppercase-v01`: the uppercase observer built against the first, frozen version of the
//! world, `percolator:observer@0.1.0` (`wit/v0.1.0/`), with wit-bindgen directly (the SDK
//! follows the current version). The host must keep loading and running such components.
//!
//! Reads the notified cell and writes it upper-cased to `derived:upper` of the same row.

#[allow(clippy::too_many_arguments)] // wit-bindgen's glue for `scan`
mod bindings {
    wit_bindgen::generate!({
        path: "../../wit/v0.1.0",
        world: "observer",
    });
}

use bindings::percolator::observer::txn;
use bindings::percolator::observer::types::{Error, Notification};

struct UppercaseV01;

impl bindings::Guest for UppercaseV01 {
    fn observe(n: Notification) -> Result<(), Error> {
        let (table, row, column) = (&n.cell.table, &n.cell.row, &n.cell.column);
        match txn::get(table, row, column)? {
            Some(text) => {
                let text = String::from_utf8(text).map_err(|_| Error::Failed(format!("{column} is not UTF-8")))?;
                txn::set(table, row, "derived:upper", text.to_uppercase().as_bytes())
            }
            None => txn::delete(table, row, "derived:upper"),
        }
    }
}

bindings::export!(UppercaseV01 with_types_in bindings);
