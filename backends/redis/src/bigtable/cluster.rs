//! A small Redis Cluster client: the slot map, a connection pool per master, and commands
//! routed by hash slot, pipelined per node, the nodes in parallel.
//!
//! Written on plain `redis` connections rather than the crate's cluster client for two things
//! the protocol needs: a `WAIT` at the end of each node's pipeline (a commit is answered only
//! after the configured replicas have it), and exact knowledge of which commands may have run
//! when something fails (a command the server refused with a redirection, `CLUSTERDOWN` or
//! `TRYAGAIN` did not run and is retried; a write whose connection broke mid-flight may have
//! run, and the caller is told so).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use redis::{Cmd, Connection, Value};

use percolator_store::{Error, Result};

/// Slots in a Redis Cluster.
pub(crate) const SLOTS: usize = 16384;

/// The hash slot of a key's hash tag (the cluster specification's CRC16 of the `{…}` part).
pub(crate) fn slot_of_tag(tag: &str) -> u16 {
    crc16::State::<crc16::XMODEM>::calculate(tag.as_bytes()) % SLOTS as u16
}

/// A pooled connection idle for longer is checked with a `PING` before it is used.
const IDLE_CHECK: Duration = Duration::from_millis(500);

/// Timeouts and retry bounds of the client.
#[derive(Clone, Debug)]
pub(crate) struct Timeouts {
    pub(crate) connect: Duration,
    pub(crate) io: Duration,
    /// How long a command that did not run (a node down, a failover in progress) is retried.
    pub(crate) retry_for: Duration,
    /// Whether a master with fewer connected replicas than a `WAIT` asks for waits only for
    /// those it has (see `RedisConfig::degraded_writes`).
    pub(crate) degraded_writes: bool,
}

/// Which master serves each slot.
struct SlotMap {
    /// `owner[slot]` indexes `nodes`; `u16::MAX` for an unserved slot.
    owner: Vec<u16>,
    nodes: Vec<String>,
}

impl SlotMap {
    fn node(&self, slot: u16) -> Option<&str> {
        self.nodes.get(*self.owner.get(slot as usize)? as usize).map(String::as_str)
    }
}

/// One node's round: the node, the indices of its commands, and what it answered.
type Round<'a> = (&'a str, Vec<usize>, std::result::Result<Vec<Value>, Failure>);

/// What a failed round means for its commands.
enum Failure {
    /// Nothing ran (refused before running, or never sent): safe to send again.
    NotRun(String),
    /// The commands may or may not have run.
    Unknown(String),
}

pub(crate) struct Cluster {
    seeds: Vec<String>,
    /// Loads the server-side library on a master (`FUNCTION LOAD REPLACE …`).
    library: Cmd,
    timeouts: Timeouts,
    map: RwLock<Arc<SlotMap>>,
    /// Idle connections per node, with when each was put back.
    pools: Mutex<HashMap<String, Vec<(Connection, Instant)>>>,
    /// Connected replicas per master and when that was read (with `degraded_writes`).
    replicas: Mutex<HashMap<String, (u32, Instant)>>,
}

impl Cluster {
    /// Connects to the cluster through any of `seeds` (`host:port`) and reads its slot map.
    /// `library` is run on every master now, and again whenever a master lacks it.
    pub(crate) fn connect(seeds: &[String], timeouts: Timeouts, library: Cmd) -> Result<Cluster> {
        if seeds.is_empty() {
            return Err(Error::InvalidArgument("the Redis backend needs at least one seed node (host:port)".into()));
        }
        let cluster = Cluster {
            seeds: seeds.to_vec(),
            library,
            timeouts,
            map: RwLock::new(Arc::new(SlotMap { owner: vec![u16::MAX; SLOTS], nodes: Vec::new() })),
            pools: Mutex::new(HashMap::new()),
            replicas: Mutex::new(HashMap::new()),
        };
        cluster.refresh()?;
        cluster.on_every_master(&cluster.library)?;
        Ok(cluster)
    }

    /// The masters currently serving slots.
    pub(crate) fn masters(&self) -> Vec<String> {
        self.map.read().map(|m| m.nodes.clone()).unwrap_or_default()
    }

    /// Rereads the slot map from the first node that answers (known masters first, then seeds).
    pub(crate) fn refresh(&self) -> Result<()> {
        let mut candidates = self.masters();
        candidates.extend(self.seeds.iter().cloned());
        let mut errors = Vec::new();
        for addr in candidates {
            match self.read_slots(&addr) {
                Ok(map) => {
                    if let Ok(mut m) = self.map.write() {
                        *m = Arc::new(map);
                    }
                    return Ok(());
                }
                Err(e) => errors.push(format!("{addr}: {e}")),
            }
        }
        Err(Error::Unavailable(format!("no Redis Cluster node answered CLUSTER SLOTS ({})", errors.join("; "))))
    }

    fn read_slots(&self, addr: &str) -> Result<SlotMap> {
        let mut con = self.take(addr).map_err(|e| Error::Unavailable(e.to_string()))?;
        let v: Value =
            redis::cmd("CLUSTER").arg("SLOTS").query(&mut con).map_err(|e| Error::Unavailable(e.to_string()))?;
        self.put(addr, con);
        let bad = || Error::Unavailable(format!("{addr} answered CLUSTER SLOTS with something unexpected"));
        let Value::Array(ranges) = v else { return Err(bad()) };
        let mut map = SlotMap { owner: vec![u16::MAX; SLOTS], nodes: Vec::new() };
        for r in ranges {
            let Value::Array(r) = r else { return Err(bad()) };
            let (Some(Value::Int(start)), Some(Value::Int(end)), Some(Value::Array(master))) =
                (r.first(), r.get(1), r.get(2))
            else {
                return Err(bad());
            };
            let host = match master.first() {
                Some(Value::BulkString(h)) => String::from_utf8_lossy(h).into_owned(),
                Some(Value::SimpleString(h)) => h.clone(),
                _ => return Err(bad()),
            };
            let Some(Value::Int(port)) = master.get(1) else { return Err(bad()) };
            // A node that does not know its own address reports an empty host: it is the one asked.
            let node = if host.is_empty() { addr.to_string() } else { format!("{host}:{port}") };
            let index = match map.nodes.iter().position(|n| *n == node) {
                Some(i) => i,
                None => {
                    map.nodes.push(node);
                    map.nodes.len() - 1
                }
            } as u16;
            for slot in *start..=*end {
                if let Some(o) = map.owner.get_mut(slot as usize) {
                    *o = index;
                }
            }
        }
        if map.nodes.is_empty() {
            return Err(Error::Unavailable(format!("{addr} serves no slots: is the cluster created?")));
        }
        Ok(map)
    }

    fn take(&self, addr: &str) -> redis::RedisResult<Connection> {
        while let Some((mut c, idle_since)) =
            self.pools.lock().ok().and_then(|mut p| p.get_mut(addr).and_then(Vec::pop))
        {
            // A connection idle for a while may lead to a server that died or restarted since:
            // a write sent on it would fail with its outcome unknown. A PING first finds out.
            if idle_since.elapsed() < IDLE_CHECK || redis::cmd("PING").query::<Value>(&mut c).is_ok() {
                return Ok(c);
            }
        }
        let client = redis::Client::open(format!("redis://{addr}/"))?;
        let con = client.get_connection_with_timeout(self.timeouts.connect)?;
        con.set_read_timeout(Some(self.timeouts.io))?;
        con.set_write_timeout(Some(self.timeouts.io))?;
        Ok(con)
    }

    fn put(&self, addr: &str, con: Connection) {
        if let Ok(mut p) = self.pools.lock() {
            let pool = p.entry(addr.to_string()).or_default();
            if pool.len() < 16 {
                pool.push((con, Instant::now()));
            }
        }
    }

    /// Runs one command on the master of `slot`.
    pub(crate) fn call(&self, slot: u16, cmd: Cmd, idempotent: bool) -> Result<Value> {
        let mut out = self.batch(vec![(slot, cmd)], idempotent, None)?;
        Ok(out.pop().unwrap_or(Value::Nil))
    }

    /// Runs commands, each on the master of its slot: one pipeline per node, the nodes in
    /// parallel; answers in order. With `wait = Some((replicas, timeout))`, each node's
    /// pipeline ends with `WAIT`, and fewer acknowledging replicas than asked is an error.
    ///
    /// Commands the cluster refused without running them (moved slots, a failover in
    /// progress, a node down before sending) are sent again for up to `retry_for`. When a
    /// connection breaks after sending, a command that is not `idempotent` fails with
    /// [`Error::Unavailable`] saying its outcome is unknown.
    pub(crate) fn batch(
        &self,
        cmds: Vec<(u16, Cmd)>,
        idempotent: bool,
        wait: Option<(u32, Duration)>,
    ) -> Result<Vec<Value>> {
        let mut answers: Vec<Option<Value>> = vec![None; cmds.len()];
        let mut pending: Vec<usize> = (0..cmds.len()).collect();
        let deadline = Instant::now() + self.timeouts.retry_for;
        let mut backoff = Duration::from_millis(20);
        let mut library_reloaded = false;
        loop {
            let map = self.map.read().map_err(|_| Error::Closed)?.clone();
            let mut by_node: HashMap<&str, Vec<usize>> = HashMap::new();
            let mut last_error = None;
            let mut unrouted = Vec::new();
            for &i in &pending {
                match map.node(cmds[i].0) {
                    Some(n) => by_node.entry(n).or_default().push(i),
                    None => unrouted.push(i),
                }
            }
            if !unrouted.is_empty() {
                last_error = Some(format!("slot {} is served by no master", cmds[unrouted[0]].0));
            }
            let rounds: Vec<Round<'_>> = if by_node.len() <= 1 {
                // One node (a point read, a one-row commit): no thread to start.
                by_node
                    .into_iter()
                    .map(|(node, idx)| {
                        let r = self.round(node, idx.iter().map(|&i| &cmds[i].1), idempotent, wait);
                        (node, idx, r)
                    })
                    .collect()
            } else {
                std::thread::scope(|s| {
                    let handles: Vec<_> = by_node
                        .into_iter()
                        .map(|(node, idx)| {
                            let cmds = &cmds;
                            s.spawn(move || {
                                let r = self.round(node, idx.iter().map(|&i| &cmds[i].1), idempotent, wait);
                                (node, idx, r)
                            })
                        })
                        .collect();
                    handles.into_iter().map(|h| h.join().expect("a Redis round panicked")).collect()
                })
            };
            let mut retry = unrouted;
            let mut stale_map = false;
            let mut function_missing = false;
            for (node, idx, r) in rounds {
                match r {
                    Ok(values) => {
                        for (i, v) in idx.into_iter().zip(values) {
                            if out_of_memory(&v) {
                                // Refused without running (a full disk's counterpart): the
                                // store's failure, not the caller's; other nodes' commands of
                                // this call may have run.
                                return Err(Error::Unavailable(format!(
                                    "{node} is out of memory (its maxmemory is reached) and refuses writes until \
                                     maxmemory is raised or memory freed: {}",
                                    describe(&v)
                                )));
                            }
                            match retry_reason(&v) {
                                Some(reason) => {
                                    stale_map |= reason != Retry::FunctionMissing;
                                    if reason == Retry::FunctionMissing {
                                        function_missing = true;
                                    }
                                    last_error = Some(format!("{node}: {}", describe(&v)));
                                    retry.push(i);
                                }
                                None => answers[i] = Some(v),
                            }
                        }
                    }
                    Err(Failure::NotRun(e)) => {
                        stale_map = true;
                        last_error = Some(format!("{node}: {e}"));
                        retry.extend(idx);
                    }
                    Err(Failure::Unknown(e)) => {
                        return Err(Error::Unavailable(format!(
                            "{node}: {e}; writes sent to it may or may not have been applied"
                        )));
                    }
                }
            }
            if retry.is_empty() {
                return Ok(answers.into_iter().map(|a| a.unwrap_or(Value::Nil)).collect());
            }
            if Instant::now() >= deadline {
                return Err(Error::Unavailable(format!(
                    "the Redis Cluster did not serve the request within {:?}: {}",
                    self.timeouts.retry_for,
                    last_error.unwrap_or_default()
                )));
            }
            if function_missing {
                // A master that joined (or was emptied) after the store opened.
                if library_reloaded {
                    return Err(Error::Unavailable(format!(
                        "a Redis master keeps lacking the percolator function library: {}",
                        last_error.unwrap_or_default()
                    )));
                }
                self.on_every_master(&self.library)?;
                library_reloaded = true;
            }
            std::thread::sleep(backoff);
            backoff = (backoff * 2).min(Duration::from_millis(500));
            if stale_map {
                // A failed refresh leaves the old map; the next round fails again and retries.
                let _ = self.refresh();
            }
            pending = retry;
        }
    }

    /// One pipeline on one node.
    fn round<'c>(
        &self,
        node: &str,
        cmds: impl Iterator<Item = &'c Cmd>,
        idempotent: bool,
        wait: Option<(u32, Duration)>,
    ) -> std::result::Result<Vec<Value>, Failure> {
        let mut con = self.take(node).map_err(|e| Failure::NotRun(e.to_string()))?;
        let wait = match wait {
            Some((replicas, timeout)) if self.timeouts.degraded_writes => {
                Some((self.replicas_to_wait(node, &mut con, replicas), timeout))
            }
            other => other,
        };
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        let mut n = 0;
        for c in cmds {
            pipe.add_command(c.clone());
            n += 1;
        }
        if let Some((replicas, timeout)) = wait {
            pipe.cmd("WAIT").arg(replicas).arg(timeout.as_millis() as u64);
        }
        let mut values: Vec<Value> = match pipe.query(&mut con) {
            Ok(v) => v,
            Err(e) if idempotent => return Err(Failure::NotRun(e.to_string())),
            Err(e) => return Err(Failure::Unknown(e.to_string())),
        };
        self.put(node, con);
        if let Some((replicas, timeout)) = wait {
            let acked = values.pop();
            let wrote = values.iter().any(|v| retry_reason(v).is_none());
            match acked {
                Some(Value::Int(k)) if k >= replicas as i64 => {}
                _ if !wrote => {}
                other => {
                    return Err(Failure::Unknown(format!(
                        "the write was applied on the master but acknowledged by {} of {replicas} replicas within {timeout:?}",
                        match other {
                            Some(Value::Int(k)) => k.to_string(),
                            _ => "an unknown number".into(),
                        }
                    )));
                }
            }
        }
        if values.len() != n {
            return Err(Failure::Unknown(format!("{node} answered {} of {n} commands", values.len())));
        }
        Ok(values)
    }

    /// How many replicas a `WAIT` on master `node` asks for, `wanted` at most: those it has
    /// connected now (read with `ROLE` at most once a second). A master that lost its replica
    /// (its replica was promoted when it died, and no other replica took its place) then keeps
    /// taking commits, durable in its append-only file alone until a replica joins it again.
    fn replicas_to_wait(&self, node: &str, con: &mut Connection, wanted: u32) -> u32 {
        let cached = self.replicas.lock().ok().and_then(|m| m.get(node).copied());
        let connected = match cached {
            Some((n, at)) if at.elapsed() < Duration::from_secs(1) => n,
            _ => {
                let n = match redis::cmd("ROLE").query::<Value>(con) {
                    Ok(Value::Array(role)) => match role.get(2) {
                        Some(Value::Array(replicas)) => replicas.len() as u32,
                        _ => wanted,
                    },
                    _ => wanted,
                };
                if let Ok(mut m) = self.replicas.lock() {
                    let before = m.insert(node.to_string(), (n, Instant::now())).map(|(b, _)| b);
                    if n < wanted && before.is_none_or(|b| b >= wanted) {
                        tracing::warn!(
                            %node,
                            connected = n,
                            wanted,
                            "Redis master has fewer replicas than commits should wait for: its commits are \
                             acknowledged by the replicas it has (degraded_writes)"
                        );
                    } else if n >= wanted && before.is_some_and(|b| b < wanted) {
                        tracing::info!(%node, connected = n, "Redis master has its replicas again");
                    }
                }
                n
            }
        };
        connected.min(wanted)
    }

    /// Runs `cmd` on every master (to load the function library).
    pub(crate) fn on_every_master(&self, cmd: &Cmd) -> Result<()> {
        for node in self.masters() {
            let mut con = self.take(&node).map_err(|e| Error::Unavailable(format!("{node}: {e}")))?;
            let v: Value = cmd.query(&mut con).map_err(|e| Error::Unavailable(format!("{node}: {e}")))?;
            if let Value::ServerError(e) = v {
                return Err(Error::Storage(format!("{node}: {}", e.details().unwrap_or(e.code()))));
            }
            self.put(&node, con);
        }
        Ok(())
    }
}

#[derive(PartialEq, Eq)]
enum Retry {
    Cluster,
    FunctionMissing,
}

/// A master at its `maxmemory` (with no eviction) refuses, without running it, every command
/// that may add data: the library's writing functions, GC's deletes among them (reads go on:
/// `percolator_range` is flagged `no-writes`, point reads are `HGET`s).
fn out_of_memory(v: &Value) -> bool {
    matches!(v, Value::ServerError(e) if e.code() == "OOM")
}

/// Why the server refused a command without running it, if it did.
fn retry_reason(v: &Value) -> Option<Retry> {
    let Value::ServerError(e) = v else { return None };
    match e.code() {
        "MOVED" | "ASK" | "TRYAGAIN" | "CLUSTERDOWN" | "LOADING" | "MASTERDOWN" | "READONLY" => Some(Retry::Cluster),
        "ERR" if e.details().is_some_and(|d| d.contains("Function not found")) => Some(Retry::FunctionMissing),
        _ => None,
    }
}

/// A server error's text.
pub(crate) fn describe(v: &Value) -> String {
    match v {
        Value::ServerError(e) => format!("{} {}", e.code(), e.details().unwrap_or("")),
        other => format!("{other:?}"),
    }
}
