//! `percolator new` and `percolator build`: a guest project anywhere (not only in this
//! repository's `guest-examples/`), from a template, built into a component with the
//! language's standard toolchain — as `spin new` / `spin build` do.
//!
//! A project is self-contained: the template, the guest SDK of its language (vendored, so no
//! package registry is needed for it) and `wit/observer.wit`, all built into this binary.
//! `build` recognises the language by the project's files: `Cargo.toml` (Rust), `app.py`
//! (Python: componentize-py), `component.js` (JavaScript: componentize-js); a Python or
//! JavaScript project's name is in its `guest.toml`.

use std::path::{Path, PathBuf};
use std::process::Command;

use clap::ValueEnum;

/// The languages a project can be written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Lang {
    /// Rust, built for wasm32-unknown-unknown with cargo.
    Rust,
    /// Python, built with componentize-py.
    Python,
    /// JavaScript, built with componentize-js.
    Js,
}

/// The componentize-py release the Python SDK is written and tested against.
const COMPONENTIZE_PY: &str = "0.25.1";

/// The WIT the project's component implements.
const OBSERVER_WIT: &str = include_str!("../../wit/observer.wit");

/// `(path in the project, contents)`; `{{name}}` and `{{type_name}}` are replaced.
type Files = &'static [(&'static str, &'static str)];

const RUST: Files = &[
    ("Cargo.toml", include_str!("../templates/rust/Cargo.toml.tmpl")),
    ("src/lib.rs", include_str!("../templates/rust/src/lib.rs.tmpl")),
    ("README.md", include_str!("../templates/rust/README.md.tmpl")),
    (".gitignore", include_str!("../templates/rust/gitignore.tmpl")),
    ("percolator-guest/Cargo.toml", include_str!("../templates/rust/sdk-Cargo.toml.tmpl")),
    ("percolator-guest/src/lib.rs", include_str!("../../guest-sdk/src/lib.rs")),
    ("percolator-guest/src/error.rs", include_str!("../../guest-sdk/src/error.rs")),
    ("percolator-guest/src/host.rs", include_str!("../../guest-sdk/src/host.rs")),
    ("percolator-guest/src/log.rs", include_str!("../../guest-sdk/src/log.rs")),
    ("percolator-guest/src/mem.rs", include_str!("../../guest-sdk/src/mem.rs")),
    ("percolator-guest/src/txn.rs", include_str!("../../guest-sdk/src/txn.rs")),
    ("wit/observer.wit", OBSERVER_WIT),
];

const PYTHON: Files = &[
    ("app.py", include_str!("../templates/python/app.py.tmpl")),
    ("test_app.py", include_str!("../templates/python/test_app.py.tmpl")),
    ("README.md", include_str!("../templates/python/README.md.tmpl")),
    (".gitignore", include_str!("../templates/python/gitignore.tmpl")),
    ("guest.toml", "name = \"{{name}}\"\nlang = \"python\"\n"),
    ("percolator_guest.py", include_str!("../../guest-sdk/python/percolator_guest.py")),
    ("wit/observer.wit", OBSERVER_WIT),
];

const JS: Files = &[
    ("app.js", include_str!("../templates/js/app.js.tmpl")),
    ("component.js", include_str!("../templates/js/component.js.tmpl")),
    ("app.test.js", include_str!("../templates/js/app.test.js.tmpl")),
    ("package.json", include_str!("../templates/js/package.json.tmpl")),
    ("README.md", include_str!("../templates/js/README.md.tmpl")),
    (".gitignore", include_str!("../templates/js/gitignore.tmpl")),
    ("guest.toml", "name = \"{{name}}\"\nlang = \"js\"\n"),
    ("percolator-guest.js", include_str!("../../guest-sdk/js/percolator-guest.js")),
    ("wit/observer.wit", OBSERVER_WIT),
];

/// Writes a new project `name` in the folder `dir` (which must not exist, or be empty).
/// Returns what was written, for the user.
pub(crate) fn new(name: &str, lang: Lang, dir: &Path) -> Result<String, String> {
    check_name(name)?;
    if dir.exists() {
        let empty =
            dir.is_dir() && std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?.next().is_none();
        if !empty {
            return Err(format!(
                "{} already exists and is not an empty folder: choose another name or --dir",
                dir.display()
            ));
        }
    }
    let files = match lang {
        Lang::Rust => RUST,
        Lang::Python => PYTHON,
        Lang::Js => JS,
    };
    let type_name = type_name(name);
    for (path, contents) in files {
        let target = dir.join(path);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("creating {}: {e}", parent.display()))?;
        }
        let text = contents.replace("{{name}}", name).replace("{{type_name}}", &type_name);
        std::fs::write(&target, text).map_err(|e| format!("writing {}: {e}", target.display()))?;
    }
    Ok(format!(
        "created {} ({lang:?} observer, {} files); next: cd {} && percolator build\n",
        dir.display(),
        files.len(),
        dir.display()
    ))
}

/// A project name: what cargo, Python and npm all accept as a package name and a file name.
fn check_name(name: &str) -> Result<(), String> {
    let ok = name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{name:?} is not a usable project name: lower-case letters, digits, '-' and '_', starting with a letter, \
             at most 64 characters"
        ))
    }
}

/// `my-observer` → `MyObserver`.
fn type_name(name: &str) -> String {
    name.split(['-', '_'])
        .filter(|p| !p.is_empty())
        .map(|p| {
            let mut c = p.chars();
            c.next().map(|f| f.to_ascii_uppercase().to_string() + c.as_str()).unwrap_or_default()
        })
        .collect()
}

/// Builds the project in `dir` into `<dir>/<name>.wasm` and returns that path.
pub(crate) fn build(dir: &Path) -> Result<PathBuf, String> {
    if dir.join("Cargo.toml").is_file() {
        return build_rust(dir);
    }
    let guest = dir.join("guest.toml");
    if guest.is_file() {
        let text = std::fs::read_to_string(&guest).map_err(|e| format!("{}: {e}", guest.display()))?;
        let field = |key: &str| {
            text.lines()
                .find_map(|l| {
                    l.split_once('=')
                        .filter(|(k, _)| k.trim() == key)
                        .map(|(_, v)| v.trim().trim_matches('"').to_owned())
                })
                .ok_or_else(|| format!("{}: no {key} = \"…\"", guest.display()))
        };
        let (name, lang) = (field("name")?, field("lang")?);
        check_name(&name).map_err(|e| format!("{}: {e}", guest.display()))?;
        let out = dir.join(format!("{name}.wasm"));
        let mut c = match lang.as_str() {
            "python" => {
                let tool = tool("PERCOLATOR_COMPONENTIZE_PY", "componentize-py", &[]).ok_or_else(|| {
                    format!("componentize-py is not on PATH: `pip install componentize-py=={COMPONENTIZE_PY}` (in a venv whose bin/ is on PATH), or set PERCOLATOR_COMPONENTIZE_PY")
                })?;
                let mut c = Command::new(tool);
                c.args(["-d", "wit", "-w", "observer", "componentize", "-p", ".", "app", "-o"]).arg(&out);
                c
            }
            "js" => {
                let tool = tool("PERCOLATOR_COMPONENTIZE_JS", "componentize-js", &[&dir.join("node_modules/.bin/componentize-js")])
                    .ok_or("componentize-js is not installed: run `npm install` in the project (or set PERCOLATOR_COMPONENTIZE_JS)")?;
                let mut c = Command::new(tool);
                // No wasi:http: the sandbox gives observers no network (fetch() is left out).
                c.args(["component.js", "-w", "wit/observer.wit", "-n", "observer", "-d", "http", "fetch-event", "-o"])
                    .arg(&out);
                c
            }
            other => return Err(format!("{}: lang {other:?} is not one of \"python\", \"js\"", guest.display())),
        };
        let status = c.current_dir(dir).status().map_err(|e| format!("running {c:?}: {e}"))?;
        if !status.success() {
            return Err(format!("building {} failed ({status})", dir.display()));
        }
        return std::path::absolute(&out).map_err(|e| format!("{}: {e}", out.display()));
    }
    Err(format!(
        "{} is not a percolator guest project: no Cargo.toml (Rust) or guest.toml (Python, JavaScript) in it; \
         `percolator new NAME --lang rust|python|js` makes one",
        dir.display()
    ))
}

/// A tool: the environment variable's path, else one of `candidates` that exists, else
/// `name` if it is on PATH.
fn tool(env: &str, name: &str, candidates: &[&Path]) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(env) {
        return Some(PathBuf::from(p));
    }
    if let Some(p) = candidates.iter().find(|p| p.is_file()) {
        return Some(std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf()));
    }
    std::env::split_paths(&std::env::var_os("PATH")?).map(|d| d.join(name)).find(|p| p.is_file())
}

fn build_rust(dir: &Path) -> Result<PathBuf, String> {
    let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).map_err(|e| format!("{}: {e}", dir.display()))?;
    let name = manifest
        .lines()
        .skip_while(|l| l.trim() != "[package]")
        .find_map(|l| {
            l.trim().strip_prefix("name").map(|r| r.trim_start().trim_start_matches('=').trim().trim_matches('"'))
        })
        .ok_or_else(|| format!("{}/Cargo.toml has no [package] name", dir.display()))?
        .to_owned();
    let triple = "wasm32-unknown-unknown";
    let target_dir = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| dir.join("target"));
    let sysroot = output(Command::new("rustc").args(["--print", "sysroot"]))?;
    let manifest_path = dir.join("Cargo.toml");
    let mut cargo;
    let mut build_std = None;
    if Path::new(&sysroot).join("lib/rustlib").join(triple).is_dir() {
        cargo = Command::new("cargo");
    } else {
        // No wasm32 std from rustup (it cannot download here): Debian's rustc-web with the
        // standard library's source, built by cargo itself (docs/guest-toolchain.md).
        let std_src = Path::new("/usr/lib/rustlib/src/rust/library");
        if !std_src.is_dir() || !Path::new("/usr/bin/cargo").is_file() {
            return Err(format!(
                "no {triple} standard library: run `rustup target add {triple}`, or on Debian \
                 `apt-get install rustc-web cargo-web rust-web-src` (the standard library's source)"
            ));
        }
        let host = output(Command::new("rustc").arg("-vV"))?
            .lines()
            .find_map(|l| l.strip_prefix("host: ").map(str::to_owned))
            .ok_or("rustc -vV names no host triple")?;
        let lld = Path::new(&sysroot).join("lib/rustlib").join(&host).join("bin/rust-lld");
        let path = format!("/usr/bin:{}", std::env::var("PATH").unwrap_or_default());
        cargo = Command::new("/usr/bin/cargo");
        cargo
            .env("PATH", path)
            .env("RUSTC", "/usr/bin/rustc")
            .env("RUSTC_BOOTSTRAP", "1")
            .env("CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_LINKER", lld);
        build_std = Some("-Zbuild-std=std,panic_abort");
    }
    cargo
        .args(["build", "--release", "--target", triple, "--manifest-path"])
        .arg(&manifest_path)
        .arg("--target-dir")
        .arg(&target_dir)
        .args(build_std);
    let status = cargo.status().map_err(|e| format!("running cargo: {e}"))?;
    if !status.success() {
        return Err(format!("cargo build of {} failed ({status})", dir.display()));
    }
    let built = target_dir.join(triple).join("release").join(format!("{}.wasm", name.replace('-', "_")));
    let out = dir.join(format!("{name}.wasm"));
    std::fs::copy(&built, &out).map_err(|e| format!("copying {} to {}: {e}", built.display(), out.display()))?;
    Ok(out)
}

/// A command's stdout, trimmed; its failure named.
fn output(c: &mut Command) -> Result<String, String> {
    let out = c.output().map_err(|e| format!("running {c:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{c:?} failed: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked_and_become_type_names() {
        assert!(check_name("my-observer").is_ok() && check_name("a1_b").is_ok());
        for bad in ["", "My", "1abc", "a b", "../x", "a/b", &"a".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        assert_eq!(type_name("my-observer_two"), "MyObserverTwo");
        assert_eq!(type_name("x"), "X");
    }
}
