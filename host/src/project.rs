//! `percolator new` and `percolator build`: a guest project anywhere (not only in this
//! repository's `guest-examples/`), from a template, built into a component with the
//! language's standard toolchain — as `spin new` / `spin build` do.
//!
//! A project is self-contained: the template, the guest SDK of its language (vendored, so no
//! package registry is needed for it) and `wit/observer.wit`, all built into this binary.
//! `build` recognises the language by the project's files: `Cargo.toml` (Rust), `app.py`
//! (Python), `app.js` (JavaScript).

use std::path::{Path, PathBuf};
use std::process::Command;

use clap::ValueEnum;

/// The languages a project can be written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Lang {
    /// Rust, built for wasm32-unknown-unknown with cargo.
    Rust,
}

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
    Err(format!(
        "{} is not a percolator guest project: no Cargo.toml (Rust) in it; `percolator new NAME --lang rust` makes one",
        dir.display()
    ))
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
