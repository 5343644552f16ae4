//! `wrong-world`: a component that does not implement `percolator:observer/observer`, for the
//! host's type checking at load time.
//!
//! It exports a function with the right name, `observe`, but the wrong type, from another
//! package, and imports nothing: a host that matched exports by name alone would call it. The
//! host must reject it when it loads the component.

mod bindings {
    wit_bindgen::generate!({
        inline: "
            package test:wrong-world@0.1.0;

            world wrong {
                export observe: func(payload: list<u8>) -> u32;
            }
        ",
    });
}

struct WrongWorld;

impl bindings::Guest for WrongWorld {
    fn observe(payload: Vec<u8>) -> u32 {
        payload.len() as u32
    }
}

bindings::export!(WrongWorld with_types_in bindings);
