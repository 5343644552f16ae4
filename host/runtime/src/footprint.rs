//! What one instance of a component creates — core module instances, tables, memories — read
//! from its bytes, so that a component over a binding's [`Limits`] is rejected at load with the
//! limit named and the value it needs (wasmtime's own check, at instantiation, says only
//! "instance count too high at 17").

use crate::runtime::Limits;

/// Counts of what instantiating a component creates (core modules instantiated, and the
/// tables and memories those modules define; imported ones are counted where they are
/// defined). A nested component is counted once, as if instantiated once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Footprint {
    /// Core module instances.
    pub instances: u32,
    /// Tables defined by the instantiated modules.
    pub tables: u32,
    /// Linear memories defined by the instantiated modules.
    pub memories: u32,
}

/// One module or component being read: a module's definitions, a component's modules.
enum Frame {
    Module { tables: u32, memories: u32 },
    Component { modules: Vec<(u32, u32)> },
}

impl Footprint {
    /// Reads `bytes` (a component, or a core module: one instance). Malformed input gives what
    /// was counted before the fault (the file was parsed before this is called).
    pub fn of(bytes: &[u8]) -> Footprint {
        use wasmparser::{Instance, Parser, Payload};
        let mut total = Footprint::default();
        let mut stack: Vec<Frame> = Vec::new();
        for payload in Parser::new(0).parse_all(bytes) {
            let Ok(payload) = payload else { break };
            match payload {
                Payload::Version { encoding, .. } => stack.push(match encoding {
                    wasmparser::Encoding::Module => Frame::Module { tables: 0, memories: 0 },
                    wasmparser::Encoding::Component => Frame::Component { modules: Vec::new() },
                }),
                Payload::TableSection(s) => {
                    if let Some(Frame::Module { tables, .. }) = stack.last_mut() {
                        *tables += s.count();
                    }
                }
                Payload::MemorySection(s) => {
                    if let Some(Frame::Module { memories, .. }) = stack.last_mut() {
                        *memories += s.count();
                    }
                }
                Payload::InstanceSection(s) => {
                    for instance in s.into_iter().flatten() {
                        if let Instance::Instantiate { module_index, .. } = instance
                            && let Some(Frame::Component { modules }) = stack.last()
                        {
                            let (tables, memories) = modules.get(module_index as usize).copied().unwrap_or_default();
                            total.instances += 1;
                            total.tables += tables;
                            total.memories += memories;
                        }
                    }
                }
                Payload::End(_) => match stack.pop() {
                    Some(Frame::Module { tables, memories }) => match stack.last_mut() {
                        Some(Frame::Component { modules }) => modules.push((tables, memories)),
                        // A core module on its own: one instance.
                        _ => {
                            total = Footprint { instances: 1, tables, memories };
                        }
                    },
                    Some(Frame::Component { .. }) | None => {}
                },
                _ => {}
            }
        }
        total
    }

    /// Fails, naming every exceeded limit with the value needed, if one instance of the
    /// component would create more than `limits` allow.
    pub fn check(&self, limits: &Limits) -> wasmtime::Result<()> {
        let over: Vec<String> = [
            ("core module instances", "max_instances", self.instances, limits.instances),
            ("tables", "max_tables", self.tables, limits.tables),
            ("memories", "max_memories", self.memories, limits.memories),
        ]
        .into_iter()
        .filter(|(_, _, needed, limit)| needed > limit)
        .map(|(what, field, needed, limit)| format!("it creates {needed} {what}, the binding allows {limit} ({field})"))
        .collect();
        if over.is_empty() {
            return Ok(());
        }
        wasmtime::bail!("the component exceeds its binding's limits: {}", over.join("; "))
    }
}
