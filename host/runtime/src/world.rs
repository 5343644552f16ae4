//! What a world (`observer`, or the sink's `transform`) provides to a component, and the check
//! of a component's imports against it before linking: wasmtime's linker stops at the first
//! import it cannot satisfy, while a guest author needs all of them and what is there instead.

use wasmtime::Engine;
use wasmtime::component::Component;
use wasmtime::component::types::ComponentItem;

/// The WIT the bindings are generated from (`bindings.rs`), so the list cannot drift from what
/// the linker defines; and the frozen earlier versions, which the host keeps serving.
const OBSERVER_WITS: [(&str, &str); 3] = [
    ("observer.wit", include_str!("../../../wit/observer.wit")),
    ("v0.2.0/observer.wit", include_str!("../../../wit/v0.2.0/observer.wit")),
    ("v0.1.0/observer.wit", include_str!("../../../wit/v0.1.0/observer.wit")),
];

/// The sink-transform world's WIT (`sink_bindings.rs`).
const SINK_WITS: [(&str, &str); 1] = [("sink/sink.wit", include_str!("../../../wit/sink/sink.wit"))];

/// The WASI 0.2 interfaces `wasmtime_wasi::p2::add_to_linker_sync` defines (deny-by-default,
/// `sandbox.rs`). Their functions are left to the linker's check.
const WASI_INTERFACES: [&str; 27] = [
    "wasi:cli/environment",
    "wasi:cli/exit",
    "wasi:cli/stdin",
    "wasi:cli/stdout",
    "wasi:cli/stderr",
    "wasi:cli/terminal-input",
    "wasi:cli/terminal-output",
    "wasi:cli/terminal-stdin",
    "wasi:cli/terminal-stdout",
    "wasi:cli/terminal-stderr",
    "wasi:clocks/monotonic-clock",
    "wasi:clocks/wall-clock",
    "wasi:filesystem/types",
    "wasi:filesystem/preopens",
    "wasi:io/error",
    "wasi:io/poll",
    "wasi:io/streams",
    "wasi:random/random",
    "wasi:random/insecure",
    "wasi:random/insecure-seed",
    "wasi:sockets/network",
    "wasi:sockets/instance-network",
    "wasi:sockets/tcp",
    "wasi:sockets/tcp-create-socket",
    "wasi:sockets/udp",
    "wasi:sockets/udp-create-socket",
    "wasi:sockets/ip-name-lookup",
];

/// The WASI version the host links (imports of any 0.2.x match it).
const WASI_VERSION: &str = "0.2.0";

/// The interfaces the world imports (what the host's linker defines), with their functions.
pub(crate) struct Provided {
    /// The package (`percolator:observer`), for naming older versions.
    package: String,
    /// Full interface name (`percolator:observer/txn@0.3.0`) and its function names, newest
    /// version first.
    interfaces: Vec<(String, Vec<String>)>,
}

impl Provided {
    /// Reads the `observer` world of `wit/observer.wit` and of the frozen versions.
    pub(crate) fn observer_world() -> Result<Provided, String> {
        Provided::read(&OBSERVER_WITS, "observer")
    }

    /// Reads the `transform` world of `wit/sink/sink.wit`.
    pub(crate) fn sink_world() -> Result<Provided, String> {
        Provided::read(&SINK_WITS, "transform")
    }

    /// The imported interfaces of the world `name` in each of `wits` (newest first).
    fn read(wits: &[(&str, &str)], name: &str) -> Result<Provided, String> {
        let mut interfaces = Vec::new();
        let mut package_name = String::new();
        for (file, text) in wits {
            let mut resolve = wit_parser::Resolve::default();
            let package = resolve.push_str(file, text).map_err(|e| format!("{file}: {e:#}"))?;
            if package_name.is_empty() {
                let n = &resolve.packages[package].name;
                package_name = format!("{}:{}", n.namespace, n.name);
            }
            let world = resolve.select_world(&[package], Some(name)).map_err(|e| format!("{file}: {e:#}"))?;
            for (key, item) in &resolve.worlds[world].imports {
                if let wit_parser::WorldItem::Interface { id, .. } = item {
                    let functions = resolve.interfaces[*id].functions.keys().cloned().collect();
                    interfaces.push((resolve.name_world_key(key), functions));
                }
            }
        }
        Ok(Provided { package: package_name, interfaces })
    }

    /// Every import of `component` the world does not provide: whole interfaces (or other
    /// items) and single functions of a provided interface, in the component's order. Type
    /// imports are left to the linker's type check (they need no definition).
    pub(crate) fn unsatisfied(&self, engine: &Engine, component: &Component) -> Vec<String> {
        let mut missing = Vec::new();
        for (name, import) in component.component_type().imports(engine) {
            match (self.interface(name), import.ty) {
                (_, ComponentItem::Type(_)) => {}
                (None, ComponentItem::ComponentInstance(_)) if is_wasi(name) => {}
                (Some(functions), ComponentItem::ComponentInstance(instance)) => {
                    for (export, item) in instance.exports(engine).map(|(n, e)| (n, e.ty)) {
                        let provided =
                            matches!(item, ComponentItem::ComponentFunc(_)) && functions.iter().any(|f| f == export);
                        if !provided && !matches!(item, ComponentItem::Type(_)) {
                            missing.push(format!("{} `{export}` of `{name}`", kind(&item)));
                        }
                    }
                }
                (_, item) => missing.push(format!("{} `{name}`", kind(&item))),
            }
        }
        missing
    }

    /// `name (f, g), …` of every interface of the newest version, then the older versions
    /// and WASI in short.
    pub(crate) fn describe(&self) -> String {
        let one = |(name, functions): &(String, Vec<String>)| {
            if functions.is_empty() {
                format!("{name} (types only)")
            } else {
                format!("{name} ({})", functions.join(", "))
            }
        };
        let newest = self.interfaces.first().and_then(|(n, _)| n.split_once('@')).map(|(_, v)| v).unwrap_or("");
        let mut parts: Vec<String> =
            self.interfaces.iter().filter(|(n, _)| n.ends_with(&format!("@{newest}"))).map(one).collect();
        let mut older: Vec<&str> = self
            .interfaces
            .iter()
            .filter_map(|(n, _)| n.split_once('@').map(|(_, v)| v))
            .filter(|v| *v != newest)
            .collect();
        older.dedup();
        if !older.is_empty() {
            parts.push(format!("the interfaces of {}@{}", self.package, older.join(" and @")));
        }
        parts.push(format!("and WASI {WASI_VERSION} (deny-by-default: no files, sockets or environment)"));
        parts.join(", ")
    }

    fn interface(&self, name: &str) -> Option<&[String]> {
        self.interfaces.iter().find(|(provided, _)| compatible(name, provided)).map(|(_, f)| f.as_slice())
    }
}

/// The linker's rule for versioned names: the same `package/interface`, and versions that are
/// semver-compatible (same major, or for `0.x` the same minor; `0.0.x` exactly).
fn compatible(import: &str, provided: &str) -> bool {
    let split = |n: &str| match n.split_once('@') {
        Some((base, version)) => (base.to_owned(), Some(version.to_owned())),
        None => (n.to_owned(), None),
    };
    let ((a, va), (b, vb)) = (split(import), split(provided));
    if a != b {
        return false;
    }
    match (va, vb) {
        (None, None) => true,
        (Some(x), Some(y)) => {
            let parts = |v: &str| v.split(['.', '-', '+']).take(3).map(str::to_owned).collect::<Vec<_>>();
            let (x, y) = (parts(&x), parts(&y));
            match (x.first().map(String::as_str), x.get(1).map(String::as_str)) {
                (Some("0"), Some("0")) => x == y,
                (Some("0"), _) => x.get(..2) == y.get(..2),
                _ => x.first() == y.first(),
            }
        }
        _ => false,
    }
}

/// A WASI 0.2 interface the host links.
fn is_wasi(name: &str) -> bool {
    WASI_INTERFACES.iter().any(|w| compatible(name, &format!("{w}@{WASI_VERSION}")))
}

fn kind(item: &ComponentItem) -> &'static str {
    match item {
        ComponentItem::ComponentFunc(_) => "function",
        ComponentItem::CoreFunc(_) => "core function",
        ComponentItem::Module(_) => "core module",
        ComponentItem::Component(_) => "component",
        ComponentItem::ComponentInstance(_) => "interface",
        ComponentItem::Type(_) => "type",
        ComponentItem::Resource(_) => "resource",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_world_provides_its_interfaces_old_versions_and_wasi() {
        let p = Provided::observer_world().unwrap();
        assert_eq!(
            p.describe(),
            "percolator:observer/types@0.3.0 (types only), \
             percolator:observer/txn@0.3.0 (get, get-many, scan, set, delete, notify-weak, combine, start-ts), \
             percolator:observer/log@0.3.0 (log), percolator:observer/config@0.3.0 (get, all), \
             the interfaces of percolator:observer@0.2.0 and @0.1.0, \
             and WASI 0.2.0 (deny-by-default: no files, sockets or environment)"
        );
        assert!(is_wasi("wasi:io/poll@0.2.9") && is_wasi("wasi:sockets/tcp@0.2.0"));
        assert!(!is_wasi("wasi:http/outgoing-handler@0.2.0") && !is_wasi("wasi:io/poll@0.3.0"));
    }

    #[test]
    fn the_sink_world_provides_log_config_and_wasi() {
        let p = Provided::sink_world().unwrap();
        assert_eq!(
            p.describe(),
            "percolator:sink/log@0.1.0 (log), percolator:sink/config@0.1.0 (get, all), \
             percolator:sink/types@0.1.0 (types only), \
             and WASI 0.2.0 (deny-by-default: no files, sockets or environment)"
        );
    }

    #[test]
    fn versions_match_like_the_linker() {
        assert!(compatible("a:b/c@0.1.0", "a:b/c@0.1.0"));
        assert!(compatible("a:b/c@0.1.3", "a:b/c@0.1.0"));
        assert!(!compatible("a:b/c@0.2.0", "a:b/c@0.1.0"));
        assert!(!compatible("a:b/d@0.1.0", "a:b/c@0.1.0"));
        assert!(compatible("a:b/c@1.4.0", "a:b/c@1.0.0"));
        assert!(!compatible("a:b/c", "a:b/c@0.1.0"));
        assert!(!compatible("a:b/c@0.0.2", "a:b/c@0.0.1"));
    }
}
