//! A PostgreSQL server of a benchmark's own, and pgbench as its clients (`--bin bank`,
//! `--bin counter`). Debian's packages, installed with apt-get if missing and this runs as
//! root; a private data directory, 127.0.0.1 on a free port, stopped by PID when dropped.
//! Included by `#[path]` (with `clients.rs` and `procfs.rs`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::clients::{Res, Run};

/// Reaped children's CPU seconds of this process (pgbench, once it exited).
fn children_cpu() -> f64 {
    crate::procfs::cpu_seconds("self").map(|(_, children)| children).unwrap_or(0.0)
}

/// CPU seconds of a server: the process, the children it reaped, and its live children.
fn tree_cpu(root: u32) -> f64 {
    let mut total = crate::procfs::cpu_seconds(&root.to_string()).map(|(own, reaped)| own + reaped).unwrap_or(0.0);
    let Ok(dir) = std::fs::read_dir("/proc") else { return total };
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{name}/stat")) else { continue };
        let Some(close) = stat.rfind(')') else { continue };
        let ppid = stat[close + 2..].split(' ').nth(1).and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(root) {
            total += crate::procfs::cpu_seconds(&name).map(|(own, _)| own).unwrap_or(0.0);
        }
    }
    total
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0").unwrap_or(false)
}

fn postgres_bin() -> Res<PathBuf> {
    let find = || -> Option<PathBuf> {
        let mut dirs: Vec<PathBuf> =
            std::fs::read_dir("/usr/lib/postgresql").ok()?.flatten().map(|e| e.path().join("bin")).collect();
        dirs.sort();
        dirs.into_iter().rev().find(|d| d.join("postgres").exists() && d.join("pgbench").exists())
    };
    if let Some(d) = find() {
        return Ok(d);
    }
    if !is_root() {
        return Err("PostgreSQL is not installed (/usr/lib/postgresql/*/bin/postgres): run `apt-get install -y postgresql`, or run this as root to have it installed".into());
    }
    eprintln!("# installing PostgreSQL from Debian's packages (apt-get install postgresql)");
    let ok = Command::new("apt-get").arg("update").arg("-qq").status()?.success()
        && Command::new("apt-get")
            .args(["install", "-y", "-qq", "--no-install-recommends", "postgresql", "postgresql-contrib"])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()?
            .success();
    if !ok {
        return Err("apt-get install postgresql failed".into());
    }
    find().ok_or_else(|| "PostgreSQL installed, but /usr/lib/postgresql/*/bin/postgres is missing".into())
}

fn free_port() -> Res<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A PostgreSQL server of this benchmark's own: private data directory, 127.0.0.1, stopped by
/// PID when dropped.
pub(crate) struct Postgres {
    bin: PathBuf,
    data: PathBuf,
    port: u16,
    child: Child,
    /// Run as user `postgres` (this process is root, which PostgreSQL refuses to be).
    as_postgres: bool,
}

impl Postgres {
    fn command(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        if self.as_postgres {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=postgres", "--regid=postgres", "--init-groups", "--"]).arg(path);
            c
        } else {
            Command::new(path)
        }
    }

    /// Starts a server with its data in `dir/pg-<name>` (log: `dir/pg-<name>.log`). `fsync`:
    /// `fsync=on`, `synchronous_commit=on` (the defaults: an answered commit survives power
    /// loss); else both off.
    pub(crate) fn start(dir: &Path, name: &str, fsync: bool) -> Res<Postgres> {
        let bin = postgres_bin()?;
        let as_postgres = is_root();
        let data = dir.join(format!("pg-{name}"));
        let log = dir.join(format!("pg-{name}.log"));
        std::fs::create_dir_all(&data)?;
        if as_postgres {
            let ok = Command::new("chown").args(["-R", "postgres:postgres"]).arg(dir).status()?.success();
            if !ok {
                return Err(format!("chown postgres {} failed", dir.display()).into());
            }
        }
        let mut pg =
            Postgres { bin, data: data.clone(), port: free_port()?, child: Command::new("true").spawn()?, as_postgres };
        let _ = pg.child.wait();
        let out = pg
            .command("initdb")
            .args(["-D"])
            .arg(&data)
            .args(["-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C"])
            .output()?;
        if !out.status.success() {
            return Err(format!("initdb failed: {}", String::from_utf8_lossy(&out.stderr)).into());
        }
        let on_off = if fsync { "on" } else { "off" };
        pg.child = pg
            .command("postgres")
            .arg("-D")
            .arg(&data)
            .args(["-c", "listen_addresses=127.0.0.1", "-p", &pg.port.to_string()])
            .arg("-c")
            .arg(format!("unix_socket_directories={}", data.display()))
            .args(["-c", &format!("fsync={on_off}"), "-c", &format!("synchronous_commit={on_off}")])
            .args(["-c", "max_connections=100", "-c", "shared_buffers=256MB", "-c", "max_wal_size=4GB"])
            .stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(&log)?))
            .spawn()?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if pg.psql("SELECT 1").is_ok() {
                return Ok(pg);
            }
            if Instant::now() > deadline || pg.child.try_wait()?.is_some() {
                return Err(format!("PostgreSQL did not start (log: {})", log.display()).into());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Runs one statement with psql; its output, unaligned, without headers.
    pub(crate) fn psql(&self, sql: &str) -> Res<String> {
        let out = Command::new(self.bin.join("psql"))
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", "postgres", "-X", "-q", "-t", "-A"])
            .args(["-v", "ON_ERROR_STOP=1", "-c", sql, "postgres"])
            .output()?;
        if !out.status.success() {
            return Err(format!("psql {sql:?}: {}", String::from_utf8_lossy(&out.stderr)).into());
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// Runs `script` with `pgbench -c clients -j 2` for `secs` (rounded up to whole seconds),
    /// retrying serialization failures (`--max-tries=1000`; any transaction still failing is
    /// an error), with `-D` variables `defines`. CPU time: the server's processes and pgbench.
    pub(crate) fn pgbench(&self, script: &Path, clients: usize, secs: f64, defines: &[(&str, String)]) -> Res<Run> {
        let server0 = tree_cpu(self.child.id());
        let client0 = children_cpu();
        let started = Instant::now();
        let mut cmd = Command::new(self.bin.join("pgbench"));
        cmd.args(["-n", "-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", "postgres"])
            .args(["-c", &clients.to_string(), "-j", &clients.min(2).to_string()])
            .args(["-T", &format!("{}", secs.ceil() as u64), "--max-tries=1000"]);
        for (name, value) in defines {
            cmd.args(["-D", &format!("{name}={value}")]);
        }
        let out = cmd.arg("-f").arg(script).arg("postgres").output()?;
        let wall = started.elapsed().as_secs_f64();
        let cpu = (tree_cpu(self.child.id()) - server0) + (children_cpu() - client0);
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        if !out.status.success() {
            return Err(format!("pgbench failed: {text}{}", String::from_utf8_lossy(&out.stderr)).into());
        }
        let field = |prefix: &str| -> Option<f64> {
            text.lines()
                .find_map(|l| l.trim().strip_prefix(prefix))
                .and_then(|r| r.split_whitespace().next()?.parse().ok())
        };
        let committed = field("number of transactions actually processed:")
            .ok_or_else(|| format!("pgbench output without a transaction count: {text}"))?
            as u64;
        let failed = field("number of failed transactions:").unwrap_or(0.0);
        if failed > 0.0 {
            return Err(format!("pgbench: {failed} transactions failed after 1000 tries: {text}").into());
        }
        // Printed only when some transaction was retried.
        let retries = field("total number of retries:").unwrap_or(0.0) as u64;
        // pgbench's own duration (-T, whole seconds) is what the count is over; `wall` adds
        // its connection set-up.
        let secs_run = secs.ceil().min(wall);
        Ok(Run::counted(committed, retries, secs_run, cpu))
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        // Fast shutdown (SIGINT) by PID, then wait for it.
        let _ = Command::new("kill").args(["-INT", &self.child.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                let _ = std::fs::remove_dir_all(&self.data);
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.data);
    }
}
