//! `percolator new` and `percolator build`: a guest project anywhere (not only in this
//! repository's `guest-examples/`), from a template, built into a component with the
//! language's standard toolchain — as `spin new` / `spin build` do.
//!
//! A project is self-contained: the template, the guest SDK of its language (vendored, so no
//! package registry is needed for it) and `wit/observer.wit`, all built into this binary.
//! `build` recognises the language by the project's files: `Cargo.toml` (Rust), `app.py`
//! (Python: componentize-py), `component.js` (JavaScript: componentize-js); a Python or
//! JavaScript project's name is in its `guest.toml`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use clap::ValueEnum;
use sha2::{Digest, Sha256};

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
    // The versions guest-examples/Cargo.lock has (a unit test checks it), so a project built
    // in their target folder compiles none of wit-bindgen's crates again.
    ("Cargo.lock", include_str!("../templates/rust/Cargo.lock.tmpl")),
    ("src/lib.rs", include_str!("../templates/rust/src/lib.rs.tmpl")),
    ("README.md", include_str!("../templates/rust/README.md.tmpl")),
    (".gitignore", include_str!("../templates/rust/gitignore.tmpl")),
    ("percolator-guest/Cargo.toml", include_str!("../templates/rust/sdk-Cargo.toml.tmpl")),
    ("percolator-guest/src/lib.rs", include_str!("../../guest-sdk/src/lib.rs")),
    ("percolator-guest/src/error.rs", include_str!("../../guest-sdk/src/error.rs")),
    ("percolator-guest/src/host.rs", include_str!("../../guest-sdk/src/host.rs")),
    ("percolator-guest/src/log.rs", include_str!("../../guest-sdk/src/log.rs")),
    ("percolator-guest/src/mem.rs", include_str!("../../guest-sdk/src/mem.rs")),
    ("percolator-guest/src/memcmp.rs", include_str!("../../guest-sdk/src/memcmp.rs")),
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

/// What `build` made.
pub(crate) struct Built {
    /// The component, `<dir>/<name>.wasm`.
    pub(crate) wasm: PathBuf,
    /// The toolchain was not run: a Python or JavaScript project's inputs are those of the
    /// build that wrote `wasm`, which is unchanged since (see [`build`]).
    pub(crate) kept: bool,
}

/// Builds the project in `dir` into `<dir>/<name>.wasm`.
///
/// componentize-py and componentize-js snapshot an interpreter's memory after running the
/// program's top level, and that snapshot holds the build's random numbers and clock readings
/// (docs/guest-toolchain.md, "Reproducible builds"): two builds of the same source differ, and
/// the host's compiled-component cache, keyed by the component's bytes, would miss on every
/// rebuild. So a Python or JavaScript build whose inputs (the project's files, the toolchain and
/// its version, for Python the site-packages it adds) equal those of the build that wrote the
/// current `<name>.wasm` keeps that file instead of running the toolchain again; the record of
/// that build is in the user's cache folder ([`cache_dir`]), so the project holds no extra file.
pub(crate) fn build(dir: &Path) -> Result<Built, String> {
    if dir.join("Cargo.toml").is_file() {
        return build_rust(dir).map(|wasm| Built { wasm, kept: false });
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
        let out = std::path::absolute(&out).map_err(|e| format!("{}: {e}", out.display()))?;
        let inputs = inputs_digest(dir, &c, lang == "python")?;
        let record = cache_dir(std::env::var_os("XDG_CACHE_HOME"), std::env::var_os("HOME"))
            .map(|d| d.join("percolator/builds").join(hex(&Sha256::digest(out.as_os_str().as_encoded_bytes()))));
        if let Some(record) = &record
            && std::fs::read_to_string(record)
                .ok()
                .zip(file_digest(&out))
                .is_some_and(|(r, o)| r == format!("{inputs} {o}"))
        {
            return Ok(Built { wasm: out, kept: true });
        }
        let status = c.current_dir(dir).status().map_err(|e| format!("running {c:?}: {e}"))?;
        if !status.success() {
            return Err(format!("building {} failed ({status})", dir.display()));
        }
        // Best effort: without the record the next build runs the toolchain again.
        if let (Some(record), Some(o)) = (&record, file_digest(&out)) {
            let folder = record.parent().unwrap_or(record);
            let _ = std::fs::create_dir_all(folder).and_then(|()| std::fs::write(record, format!("{inputs} {o}")));
        }
        return Ok(Built { wasm: out, kept: false });
    }
    Err(format!(
        "{} is not a percolator guest project: no Cargo.toml (Rust) or guest.toml (Python, JavaScript) in it; \
         `percolator new NAME --lang rust|python|js` makes one",
        dir.display()
    ))
}

/// The user's cache folder: `$XDG_CACHE_HOME`, else `$HOME/.cache` (relative values ignored,
/// as the XDG base directory specification says).
fn cache_dir(xdg_cache_home: Option<OsString>, home: Option<OsString>) -> Option<PathBuf> {
    let absolute = |p: OsString| Some(PathBuf::from(p)).filter(|p| p.is_absolute());
    xdg_cache_home.and_then(absolute).or_else(|| home.and_then(absolute).map(|h| h.join(".cache")))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The SHA-256 of a file's bytes, if it can be read.
fn file_digest(path: &Path) -> Option<String> {
    std::fs::read(path).ok().map(|b| hex(&Sha256::digest(b)))
}

/// What a Python or JavaScript build depends on, as one SHA-256: the command (tool and
/// arguments), the tool's `--version`, every file of the project (but outputs, caches,
/// `node_modules` — the toolchain, named by its version — and hidden entries such as `.git`
/// or `.venv`), and for Python the site-packages folders componentize-py puts on the module
/// path (their entries' names and modification times: installing, upgrading or removing a
/// package changes them).
fn inputs_digest(dir: &Path, c: &Command, python: bool) -> Result<String, String> {
    let mut h = Sha256::new();
    let mut field = |bytes: &[u8]| {
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    field(b"percolator build inputs 1");
    field(c.get_program().as_encoded_bytes());
    for arg in c.get_args() {
        field(arg.as_encoded_bytes());
    }
    // A tool without `--version` still builds; its failure's text stands in.
    field(output(Command::new(c.get_program()).arg("--version")).unwrap_or_else(|e| e).as_bytes());
    let mut files = Vec::new();
    project_files(dir, Path::new(""), &mut files)?;
    files.sort();
    for rel in files {
        let path = dir.join(&rel);
        field(rel.as_os_str().as_encoded_bytes());
        field(&std::fs::read(&path).map_err(|e| format!("reading {}: {e}", path.display()))?);
    }
    if python {
        field(std::env::var_os("VIRTUAL_ENV").unwrap_or_default().as_encoded_bytes());
        for site in site_packages() {
            field(site.as_os_str().as_encoded_bytes());
            let mut entries: Vec<(OsString, Option<std::time::SystemTime>)> = std::fs::read_dir(&site)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| (e.file_name(), e.metadata().and_then(|m| m.modified()).ok()))
                .collect();
            entries.sort();
            for (name, modified) in entries {
                field(name.as_encoded_bytes());
                field(format!("{modified:?}").as_bytes());
            }
        }
    }
    Ok(hex(&h.finalize()))
}

/// The project's files below `rel`, relative to `dir`; see [`inputs_digest`].
fn project_files(dir: &Path, rel: &Path, files: &mut Vec<PathBuf>) -> Result<(), String> {
    let here = dir.join(rel);
    for entry in std::fs::read_dir(&here).map_err(|e| format!("{}: {e}", here.display()))? {
        let entry = entry.map_err(|e| format!("{}: {e}", here.display()))?;
        let name = entry.file_name();
        let text = name.to_string_lossy();
        if text.starts_with('.') || ["node_modules", "__pycache__", "target"].contains(&&*text) {
            continue;
        }
        if entry.path().is_dir() {
            project_files(dir, &rel.join(&name), files)?;
        } else if !text.ends_with(".wasm") && !text.ends_with(".wasm.tmp") {
            files.push(rel.join(&name));
        }
    }
    Ok(())
}

/// The site-packages folders componentize-py adds to the module path: `$VIRTUAL_ENV`'s, else
/// those `python3`'s `site` module names (it also asks `pipenv --venv`, not followed here).
fn site_packages() -> Vec<PathBuf> {
    if let Some(venv) = std::env::var_os("VIRTUAL_ENV") {
        return std::fs::read_dir(Path::new(&venv).join("lib"))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path().join("site-packages"))
            .filter(|p| p.is_dir())
            .collect();
    }
    let script = "import site; print(';'.join([site.getusersitepackages()] + site.getsitepackages()))";
    output(Command::new("python3").args(["-c", script]))
        .map(|s| s.split(';').map(PathBuf::from).collect())
        .unwrap_or_default()
}

/// A tool: the environment variable's path, else one of `candidates` that exists, else
/// `name` if it is on PATH.
fn tool(env: &str, name: &str, candidates: &[&Path]) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(env) {
        let p = PathBuf::from(p);
        // Without a current folder (deleted under us) the path stays as given.
        return Some(match std::env::current_dir() {
            Ok(cwd) => tool_from_env(p, &cwd),
            Err(_) => p,
        });
    }
    if let Some(p) = candidates.iter().find(|p| p.is_file()) {
        return Some(std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf()));
    }
    std::env::split_paths(&std::env::var_os("PATH")?).map(|d| d.join(name)).find(|p| p.is_file())
}

/// A tool's path from its environment variable: a relative path with a folder in it
/// (`target/venv/bin/componentize-py`) is taken from `cwd`, where the user typed it, as the
/// tool runs in the project's folder; a bare name is looked up on PATH when it runs.
fn tool_from_env(path: PathBuf, cwd: &Path) -> PathBuf {
    if path.is_relative() && path.components().count() > 1 { cwd.join(path) } else { path }
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
    let target_dir = guest_target_dir(
        dir,
        std::env::var_os("CARGO_TARGET_DIR"),
        cache_dir(std::env::var_os("XDG_CACHE_HOME"), std::env::var_os("HOME")),
    );
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
        if !std_built(&target_dir, triple) {
            eprintln!("{}", build_std_notice(&target_dir));
        }
    }
    cargo
        .args(["build", "--release", "--target", triple, "--manifest-path"])
        .arg(&manifest_path)
        .arg("--target-dir")
        .arg(&target_dir)
        .args(build_std);
    // Cargo locks the target folder during a build, not until the module is copied out: two
    // projects of one name building at once could each copy the other's. This lock covers both.
    std::fs::create_dir_all(&target_dir).map_err(|e| format!("creating {}: {e}", target_dir.display()))?;
    let lock_path = target_dir.join("percolator-build.lock");
    let lock = std::fs::File::create(&lock_path).map_err(|e| format!("{}: {e}", lock_path.display()))?;
    match lock.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            eprintln!("percolator build: waiting for another guest build in {}", target_dir.display());
            lock.lock().map_err(|e| format!("locking {}: {e}", lock_path.display()))?;
        }
        Err(std::fs::TryLockError::Error(e)) => return Err(format!("locking {}: {e}", lock_path.display())),
    }
    let status = cargo.status().map_err(|e| format!("running cargo: {e}"))?;
    if !status.success() {
        return Err(format!("cargo build of {} failed ({status})", dir.display()));
    }
    let built = target_dir.join(triple).join("release").join(format!("{}.wasm", name.replace('-', "_")));
    let out = dir.join(format!("{name}.wasm"));
    std::fs::copy(&built, &out).map_err(|e| format!("copying {} to {}: {e}", built.display(), out.display()))?;
    Ok(out)
}

/// Where a Rust guest builds: `CARGO_TARGET_DIR` if set (as cargo itself would), else one
/// folder in the user's cache shared by every guest project — the wasm32 standard library
/// (when built from source) and the crates all guests use (wit-bindgen) are compiled once, and
/// each project's own crate beside the others' (cargo tells them apart by path) — else, with
/// no cache folder, the project's `target/`.
fn guest_target_dir(dir: &Path, cargo_target_dir: Option<OsString>, cache: Option<PathBuf>) -> PathBuf {
    match (cargo_target_dir.filter(|d| !d.is_empty()), cache) {
        (Some(d), _) => PathBuf::from(d),
        (None, Some(cache)) => cache.join("percolator/guest-target"),
        (None, None) => dir.join("target"),
    }
}

/// Whether `target_dir` holds a `-Zbuild-std` standard library for `triple` (a release build's).
fn std_built(target_dir: &Path, triple: &str) -> bool {
    std::fs::read_dir(target_dir.join(triple).join("release/deps")).into_iter().flatten().flatten().any(|e| {
        let name = e.file_name();
        let name = name.to_string_lossy();
        name.starts_with("libstd-") && name.ends_with(".rlib")
    })
}

/// Said before a build that compiles the standard library, which takes minutes.
fn build_std_notice(target_dir: &Path) -> String {
    format!(
        "percolator build: rustup has no wasm32-unknown-unknown standard library here, so this first \
         build compiles it from source (Debian's rust-web-src, -Zbuild-std): one to several minutes \
         (1 to 4.5 on 2 cores) and 300 to 500 MB in {}, shared by every guest project built after it \
         (seconds each). The fast path: `rustup target add wasm32-unknown-unknown`.",
        target_dir.display()
    )
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

    /// A Rust project gets every source file of the SDK (a module added to `guest-sdk/src`
    /// and not vendored breaks every `percolator new` project's build).
    #[test]
    fn rust_projects_vendor_every_file_of_the_sdk() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../guest-sdk/src");
        let mut missing = Vec::new();
        for entry in std::fs::read_dir(&dir).unwrap() {
            let name = entry.unwrap().file_name().into_string().unwrap();
            let vendored = format!("percolator-guest/src/{name}");
            match RUST.iter().find(|(path, _)| *path == vendored) {
                Some((_, contents)) => {
                    assert_eq!(*contents, std::fs::read_to_string(dir.join(&name)).unwrap(), "{name}")
                }
                None => missing.push(name),
            }
        }
        assert!(missing.is_empty(), "guest-sdk/src files not vendored by `percolator new`: {missing:?}");
    }

    /// A Rust project's Cargo.lock pins every crate at the version (and checksum)
    /// guest-examples/Cargo.lock has: built in the examples' target folder (the tests', or a
    /// user's who built them), it then compiles only the SDK and itself. A fresh resolution
    /// took the newest syn, anyhow, hashbrown and itoa and so compiled wit-bindgen's macro
    /// crates a second time (a minute on 2 cores).
    #[test]
    fn the_rust_template_locks_the_versions_the_example_guests_use() {
        let packages = |text: &str| -> Vec<(String, String, Option<String>)> {
            let lock: toml::Table = toml::from_str(text).unwrap();
            let list = lock["package"].as_array().unwrap();
            let field = |p: &toml::Value, k: &str| p.get(k).and_then(|v| v.as_str()).map(str::to_owned);
            list.iter()
                .map(|p| (field(p, "name").unwrap(), field(p, "version").unwrap(), field(p, "checksum")))
                .collect()
        };
        let (_, template) = RUST.iter().find(|(path, _)| *path == "Cargo.lock").expect("a Cargo.lock");
        let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../guest-examples/Cargo.lock");
        let examples = packages(&std::fs::read_to_string(examples).unwrap());
        let ours = packages(template);
        let registry: Vec<_> = ours.iter().filter(|p| p.2.is_some()).collect();
        assert!(registry.iter().any(|p| p.0 == "wit-bindgen" && p.1 == "0.61.1"), "{ours:?}");
        for p in registry {
            assert!(examples.contains(p), "{p:?} is not in guest-examples/Cargo.lock");
        }
        let local: Vec<_> = ours.iter().filter(|p| p.2.is_none()).map(|p| p.0.as_str()).collect();
        assert_eq!(local, ["percolator-guest", "{{name}}"]);
    }

    /// `PERCOLATOR_COMPONENTIZE_PY=target/venv/bin/componentize-py percolator build proj`
    /// runs the tool in `proj`: the relative path is taken from where the user ran the build
    /// (it failed with "No such file or directory").
    #[test]
    fn a_relative_tool_path_is_taken_from_where_the_build_runs() {
        let cwd = Path::new("/home/u/work");
        assert_eq!(
            tool_from_env("target/venv/bin/componentize-py".into(), cwd),
            cwd.join("target/venv/bin/componentize-py")
        );
        assert_eq!(tool_from_env("./componentize-js".into(), cwd), cwd.join("./componentize-js"));
        assert_eq!(tool_from_env("/opt/bin/componentize-py".into(), cwd), Path::new("/opt/bin/componentize-py"));
        assert_eq!(tool_from_env("componentize-py".into(), cwd), Path::new("componentize-py"));
    }

    #[test]
    fn names_are_checked_and_become_type_names() {
        assert!(check_name("my-observer").is_ok() && check_name("a1_b").is_ok());
        for bad in ["", "My", "1abc", "a b", "../x", "a/b", &"a".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        assert_eq!(type_name("my-observer_two"), "MyObserverTwo");
        assert_eq!(type_name("x"), "X");
    }

    #[test]
    fn build_inputs_are_the_project_files_and_the_tool() {
        let dir = std::env::temp_dir().join(format!("percolator-inputs-{}", std::process::id()));
        let write = |rel: &str, text: &str| {
            let p = dir.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        write("app.py", "x = 1\n");
        write("wit/observer.wit", "package a:b;\n");
        let tool = || {
            let mut c = Command::new("echo"); // `echo --version`: GNU's, or the word
            c.args(["componentize", "app"]);
            c
        };
        let digest = || inputs_digest(&dir, &tool(), false).unwrap();
        let before = digest();
        // Outputs, caches, dependencies and hidden folders are not inputs.
        for rel in
            ["app.wasm", "app.wasm.tmp", "__pycache__/app.pyc", "node_modules/x/y.js", ".git/HEAD", "sub/.venv/z"]
        {
            write(rel, "anything");
        }
        assert_eq!(digest(), before);
        // Every other file is, in any folder, and so is the command.
        write("wit/observer.wit", "package a:c;\n");
        let changed = digest();
        assert_ne!(changed, before);
        write("lib/helper.py", "");
        assert_ne!(digest(), changed);
        let mut other = tool();
        other.arg("-o");
        assert_ne!(inputs_digest(&dir, &other, false).unwrap(), digest());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn rust_guests_share_one_target_folder_in_the_cache() {
        let os = |s: &str| Some(OsString::from(s));
        assert_eq!(cache_dir(os("/xdg"), os("/home/u")), Some(PathBuf::from("/xdg")));
        assert_eq!(cache_dir(None, os("/home/u")), Some(PathBuf::from("/home/u/.cache")));
        assert_eq!(cache_dir(os("relative"), os("/home/u")), Some(PathBuf::from("/home/u/.cache")));
        assert_eq!(cache_dir(None, None), None);
        let dir = Path::new("/p/shout");
        let cache = Some(PathBuf::from("/c"));
        assert_eq!(guest_target_dir(dir, os("/t"), cache.clone()), PathBuf::from("/t"));
        assert_eq!(guest_target_dir(dir, os(""), cache.clone()), PathBuf::from("/c/percolator/guest-target"));
        assert_eq!(guest_target_dir(dir, None, cache), PathBuf::from("/c/percolator/guest-target"));
        assert_eq!(guest_target_dir(dir, None, None), PathBuf::from("/p/shout/target"));
    }

    #[test]
    fn a_target_folder_without_std_gets_the_notice() {
        let target = std::env::temp_dir().join(format!("percolator-std-built-{}", std::process::id()));
        let deps = target.join("wasm32-unknown-unknown/release/deps");
        std::fs::create_dir_all(&deps).unwrap();
        std::fs::write(deps.join("libcore-0123.rlib"), "").unwrap();
        assert!(!std_built(&target, "wasm32-unknown-unknown"));
        std::fs::write(deps.join("libstd-0123.rlib"), "").unwrap();
        assert!(std_built(&target, "wasm32-unknown-unknown"));
        assert!(!std_built(&target.join("nothing"), "wasm32-unknown-unknown"));
        std::fs::remove_dir_all(&target).unwrap();
        let notice = build_std_notice(Path::new("/c/percolator/guest-target"));
        assert!(notice.contains("several minutes") && notice.contains("/c/percolator/guest-target"), "{notice}");
        assert!(notice.contains("rustup target add wasm32-unknown-unknown"), "{notice}");
    }
}
