//! `percolator:observer/config` (0.2.0): the binding's parameters.

use super::HostState;
use crate::bindings::percolator::observer::config::Host;

impl Host for HostState {
    fn get(&mut self, key: String) -> Option<String> {
        self.params.get(&key).cloned()
    }

    fn all(&mut self) -> Vec<(String, String)> {
        self.params.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
    }
}
