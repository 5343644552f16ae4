//! `percolator:sink/config`: the sink's parameters.

use super::TransformState;
use crate::sink_bindings::percolator::sink::config::Host;

impl Host for TransformState {
    fn get(&mut self, key: String) -> Option<String> {
        self.params.get(&key).cloned()
    }

    fn all(&mut self) -> Vec<(String, String)> {
        self.params.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }
}
