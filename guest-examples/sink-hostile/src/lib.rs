//! `sink-hostile`: a sink transform that misbehaves in one way per batch, chosen by the sink's
//! parameter `mode`, for the host's tests (`host/runtime/tests/transform.rs`):
//!
//! - `trap`: panics (the message reaches the host through `log`);
//! - `spin`: loops forever (the deadline);
//! - `memory`: allocates until the memory limit stops it;
//! - `foreign-ts`: returns a change whose commit timestamp is none of the batch's;
//! - `unordered`: returns the batch in reverse commit-timestamp order;
//! - `bad-column`: returns a change of a column in the reserved `__` namespace;
//! - `duplicate`: maps every change to the column `page:same`, so that two changes of one
//!   transaction become two values of one cell at one version;
//! - `error`: returns `err`;
//! - `entropy`: returns, per change, the wall clock and a random number read through WASI
//!   (the host fixes the one and seeds the other, so two runs agree);
//! - `environment`: returns, per change, the number of environment variables and arguments
//!   it sees through WASI (`0 0` in the host's sandbox);
//! - anything else: returns the batch unchanged.

mod bindings {
    wit_bindgen::generate!({
        path: "wit",
        world: "test:sink-hostile/hostile",
        generate_all,
    });
}

use bindings::percolator::sink::types::Change;
use bindings::percolator::sink::{config, log};
use bindings::wasi::{cli::environment, clocks::wall_clock, random::random};

struct Hostile;

impl bindings::Guest for Hostile {
    fn transform(batch: Vec<Change>) -> Result<Vec<Change>, String> {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            std::panic::set_hook(Box::new(|info| log::log(log::Level::Error, &format!("transform panicked: {info}"))));
        });
        let mode = config::get("mode").unwrap_or_default();
        match mode.as_str() {
            "trap" => panic!("deliberate panic on a batch of {}", batch.len()),
            "spin" => {
                let mut n: u64 = 0;
                loop {
                    n = std::hint::black_box(n.wrapping_add(1));
                }
            }
            "memory" => {
                let mut hoard: Vec<Vec<u8>> = Vec::new();
                loop {
                    hoard.push(vec![1; 1 << 20]);
                    std::hint::black_box(&hoard);
                }
            }
            "foreign-ts" => {
                let newest = batch.iter().map(|c| c.commit_ts).max().unwrap_or(0);
                Ok(batch.into_iter().map(|c| Change { commit_ts: newest + 1, ..c }).collect())
            }
            "unordered" => Ok(batch.into_iter().rev().collect()),
            "bad-column" => Ok(batch.into_iter().map(|c| Change { column: "__secret".into(), ..c }).collect()),
            "duplicate" => Ok(batch.into_iter().map(|c| Change { column: "page:same".into(), ..c }).collect()),
            "error" => Err(format!("refusing a batch of {} changes", batch.len())),
            "entropy" => Ok(batch
                .into_iter()
                .map(|c| {
                    let now = wall_clock::now();
                    let value = format!("{}.{:09} {}", now.seconds, now.nanoseconds, random::get_random_u64());
                    Change { value: Some(value.into_bytes()), ..c }
                })
                .collect()),
            "environment" => {
                let seen = format!("{} {}", environment::get_environment().len(), environment::get_arguments().len());
                Ok(batch.into_iter().map(|c| Change { value: Some(seen.clone().into_bytes()), ..c }).collect())
            }
            _ => Ok(batch),
        }
    }
}

bindings::export!(Hostile with_types_in bindings);
