//! The one `bindgen!` of the sink-transform world (`wit/sink/sink.wit`), apart from the
//! observer world's (`bindings.rs`): its own package, its own linker and store data.

wasmtime::component::bindgen!({
    path: "../../wit/sink",
    world: "transform",
});

pub(crate) use percolator::sink::types::Change as WitChange;
