//! A host whose store fills its disk: `percolator up` with the store on a small tmpfs this test
//! mounts (the configuration, the observers and the component cache elsewhere), a load that
//! fills it. The load fails naming the cause; `status` and `/v1/health` say the store is
//! read-only because the disk is full; the observer's runs are neither failures nor dead
//! letters; once the filler is deleted the same host takes writes again by itself, the load
//! finishes and the pipeline reaches its fixed point, with every record there.
//!
//! At durability none the same: what it acknowledged stays in memory until a checkpoint can
//! write it, and the host heals by itself.
//!
//! Mounting needs root (or `CAP_SYS_ADMIN`): without it the test prints why and returns,
//! unless `PERCOLATOR_REQUIRE_MOUNT` is set (`scripts/test` sets it), when it fails.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

mod common;

use percolator_testkit::{SmallDisk, noise};

/// `uppercase` on `docs/raw:text`; a run counted as failed would be a dead letter at once.
const UPPER: &str = "\n[[binding]]\nname = \"upper\"\nwasm = \"uppercase.wasm\"\ntable = \"docs\"\ncolumn = \"raw:text\"\nwrites = [\"docs/derived:upper\"]\nmax_attempts = 1\n";

/// The configuration, observers, cache and logs (not on the small disk); removed on drop.
struct Sandbox {
    dir: PathBuf,
}

impl Sandbox {
    fn new(name: &str, store: &Path, durability: &str) -> Sandbox {
        let dir = std::env::temp_dir().join(format!("percolator-full-disk-{name}-files-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("observers")).unwrap();
        std::fs::copy(common::guest("uppercase"), dir.join("observers/uppercase.wasm")).unwrap();
        std::fs::write(
            dir.join("p.toml"),
            format!(
                "[store]\npath = {:?}\ndurability = \"{durability}\"\n[observers]\ndir = \"observers\"\ncache_dir = \"cache\"\n\
                 [http]\nlisten = \"127.0.0.1:0\"\n{UPPER}",
                store.display().to_string()
            ),
        )
        .unwrap();
        Sandbox { dir }
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_percolator"))
            .current_dir(&self.dir)
            .env_remove("PERCOLATOR_TOKEN")
            .env_remove("PERCOLATOR_CONFIG")
            .env_remove("RUST_LOG")
            .arg("--config")
            .arg(self.dir.join("p.toml"))
            .args(args)
            .output()
            .unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(out.status.success(), "percolator {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    }

    fn json(&self, args: &[&str]) -> serde_json::Value {
        serde_json::from_str(&self.ok(args)).unwrap()
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A `percolator up` child process, stopped with SIGTERM.
struct Host {
    child: Option<Child>,
    url: String,
    log: PathBuf,
}

impl Host {
    fn start(sb: &Sandbox, store: &Path) -> Host {
        let endpoint = PathBuf::from(format!("{}.endpoint", store.display()));
        let log = sb.dir.join("host.log");
        let mut child = Command::new(env!("CARGO_BIN_EXE_percolator"))
            .current_dir(&sb.dir)
            .env_remove("PERCOLATOR_TOKEN")
            .env("RUST_LOG", "info")
            .arg("--config")
            .arg(sb.dir.join("p.toml"))
            .arg("up")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        common::wait_for_endpoint(&mut child, &endpoint, &log);
        let url = std::fs::read_to_string(&endpoint).unwrap().trim().to_owned();
        let host = Host { child: Some(child), url, log };
        // Until the pipeline is loaded.
        wait_for("the pipeline to load", Duration::from_secs(120), || {
            let s = sb.json(&["status", "--json"]);
            s["host"]["generation"].as_u64().is_some_and(|g| g >= 1)
        });
        host
    }

    fn health(&self) -> serde_json::Value {
        let out =
            Command::new("curl").args(["-sS", "--max-time", "30"]).arg(format!("{}/v1/health", self.url)).output();
        match out {
            Ok(o) if o.status.success() => serde_json::from_slice(&o.stdout).unwrap(),
            _ => health_without_curl(&self.url),
        }
    }

    fn stop(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().unwrap();
        let _ = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "the host ignored SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// `GET /v1/health` over a plain socket.
fn health_without_curl(url: &str) -> serde_json::Value {
    use std::io::Read;
    let addr = url.strip_prefix("http://").unwrap();
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(s, "GET /v1/health HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    let body = answer.split_once("\r\n\r\n").unwrap().1;
    serde_json::from_str(body).unwrap_or_else(|e| panic!("health is not JSON ({e}): {answer}"))
}

impl Drop for Host {
    fn drop(&mut self) {
        if let Some(child) = self.child.take() {
            common::stop_process(child);
        }
    }
}

fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Text no compression shrinks much (values of 256 bytes and more are deflated): hex of a
/// xorshift stream, different per record.
fn text(i: u64, len: usize) -> String {
    noise(i, len).into_iter().map(|x| char::from(b"0123456789abcdef"[usize::from(x & 15)])).collect()
}

fn records(from: u64, to: u64) -> String {
    (from..to).map(|i| format!("{{\"row\": \"d{i:05}\", \"text\": \"{}\"}}\n", text(i, 2048))).collect()
}

#[test]
fn a_host_on_a_full_disk_says_so_and_takes_writes_again_once_space_is_freed() {
    let Some(disk) = SmallDisk::mount("host", 16) else { return };
    let store = disk.dir.join("store.redb");
    let sb = Sandbox::new("host", &store, "fsync");
    let mut host = Host::start(&sb, &store);
    let first = sb.dir.join("first.jsonl");
    std::fs::write(&first, records(0, 50)).unwrap();
    sb.ok(&["load", "docs", first.to_str().unwrap()]);
    sb.ok(&["wait", "--timeout", "120"]);

    // Fill the disk but for 256 KiB; a load of 3 MB fills the rest.
    let filler = disk.dir.join("filler");
    disk.fill(&filler, 256 << 10);
    let big = sb.dir.join("big.jsonl");
    std::fs::write(&big, records(50, 1550)).unwrap();
    let out = sb.run(&["load", "docs", big.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the load fit on a full disk: {stderr}");
    assert!(stderr.contains("No space left on device"), "the cause is not named: {stderr}");
    assert!(stderr.contains(&store.display().to_string()), "the file is not named: {stderr}");
    assert!(!stderr.contains("storage: storage:") && !stderr.contains("Previous I/O error"), "{stderr}");

    // Not a byte left: the file's own free pages (a failed commit grew it) may still take a
    // few writes — the store then takes them, truthfully, until they are used up: a probe may
    // find one and clear the failure until the next write fails.
    let filler2 = disk.dir.join("filler2");
    disk.fill(&filler2, 0);
    // status (JSON and text) and /v1/health say the store is read-only because the disk is
    // full (seen together: a probe may find a free page meanwhile and clear it for a moment).
    let (status, text_status, health) = {
        let start = Instant::now();
        loop {
            let seen = (sb.json(&["status", "--json"]), sb.ok(&["status"]), host.health());
            if !seen.0["store"]["store_failure"].is_null() && seen.1.contains("READ-ONLY") && seen.2["ok"] == false {
                break seen;
            }
            assert!(start.elapsed() < Duration::from_secs(60), "the full disk is not reported: {seen:?}");
            // Writes use up the free pages (the load resumes where it stopped, and fails).
            let _ = sb.run(&["load", "docs", big.to_str().unwrap()]);
        }
    };
    let failure = &status["store"]["store_failure"];
    assert_eq!(failure["disk_full"], true, "{status}");
    assert!(failure["error"].as_str().unwrap().contains("No space left on device"), "{failure}");
    assert!(
        text_status.contains("store: READ-ONLY since")
            && text_status.contains("the disk is full; writes resume by themselves once one succeeds"),
        "{text_status}"
    );
    assert_eq!(health["store_failure"]["disk_full"], true, "{health}");
    // Reads go on.
    assert_eq!(sb.ok(&["get", "docs", "d00003", "derived:upper"]).trim(), text(3, 2048).to_uppercase());
    // A while on the full disk: the observer's runs wait, neither failures nor dead letters.
    std::thread::sleep(Duration::from_secs(2));
    let status = sb.json(&["status", "--json"]);
    let upper = status["host"]["bindings"].as_array().unwrap().iter().find(|b| b["name"] == "upper").unwrap();
    assert_eq!(upper["failures"], 0, "{upper}");
    assert_eq!(status["store"]["dead_letters"], 0, "{status}");
    assert_eq!(status["host"]["metrics"]["observer_failures"], 0);

    // Space freed: the same host takes writes again, the load finishes, the pipeline too.
    std::fs::remove_file(&filler).unwrap();
    std::fs::remove_file(&filler2).unwrap();
    wait_for("the host to take writes again", Duration::from_secs(30), || host.health()["ok"] == true);
    assert!(sb.json(&["status", "--json"])["store"]["store_failure"].is_null());
    sb.ok(&["load", "docs", big.to_str().unwrap()]);
    sb.ok(&["wait", "--timeout", "300"]);
    let upper = sb.ok(&["scan", "docs", "--columns", "derived:upper", "--limit", "100000"]);
    let expected: String =
        (0..1550).map(|i| format!("d{i:05}\tderived:upper\t{}\n", text(i, 2048).to_uppercase())).collect();
    assert!(upper == expected, "the pipeline's output differs ({} lines)", upper.lines().count());
    let status = sb.json(&["status", "--json"]);
    assert_eq!(status["store"]["dead_letters"], 0, "{status}");
    assert_eq!(status["host"]["metrics"]["observer_failures"], 0);
    let exit = host.stop();
    assert!(exit.success(), "the host exited with {exit}: {}", std::fs::read_to_string(&host.log).unwrap_or_default());
}

/// At durability none too, a host on a full disk keeps what it acknowledged (in memory, the
/// memtable, until a checkpoint can write it) and takes writes again by itself once space is
/// freed: no exit, no restart, nothing lost.
#[test]
fn at_durability_none_a_host_on_a_full_disk_keeps_what_it_acknowledged_and_heals() {
    let Some(disk) = SmallDisk::mount("none", 16) else { return };
    let store = disk.dir.join("store.redb");
    let sb = Sandbox::new("none", &store, "none");
    let mut host = Host::start(&sb, &store);
    let first = sb.dir.join("first.jsonl");
    std::fs::write(&first, records(0, 50)).unwrap();
    sb.ok(&["load", "docs", first.to_str().unwrap()]);
    sb.ok(&["wait", "--timeout", "120"]);

    let filler = disk.dir.join("filler");
    disk.fill(&filler, 2 << 20);
    let big = sb.dir.join("big.jsonl");
    std::fs::write(&big, records(50, 1550)).unwrap();
    // Loads (each batch acknowledged before it is durable) until the store reports the full
    // disk; the host keeps running.
    let start = Instant::now();
    loop {
        assert!(host.child.as_mut().unwrap().try_wait().unwrap().is_none(), "the host exited");
        if !sb.json(&["status", "--json"])["store"]["store_failure"].is_null() {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(120), "the full disk is not reported");
        let _ = sb.run(&["load", "docs", big.to_str().unwrap()]);
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(sb.ok(&["get", "docs", "d00003", "raw:text"]).trim(), text(3, 2048));

    // Space freed: the same host takes writes again, the load and the pipeline finish.
    std::fs::remove_file(&filler).unwrap();
    wait_for("the host to take writes again", Duration::from_secs(30), || host.health()["ok"] == true);
    sb.ok(&["load", "docs", big.to_str().unwrap()]);
    sb.ok(&["wait", "--timeout", "300"]);
    let upper = sb.ok(&["scan", "docs", "--columns", "derived:upper", "--limit", "100000"]);
    let expected: String =
        (0..1550).map(|i| format!("d{i:05}\tderived:upper\t{}\n", text(i, 2048).to_uppercase())).collect();
    assert!(upper == expected, "the pipeline's output differs ({} lines)", upper.lines().count());
    assert_eq!(sb.json(&["status", "--json"])["store"]["dead_letters"], 0);
    let exit = host.stop();
    assert!(exit.success(), "the host exited with {exit}: {}", std::fs::read_to_string(&host.log).unwrap_or_default());
}
