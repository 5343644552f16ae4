//! The timestamp oracle as a service: one leader, elected through an etcd lease, hands out every
//! timestamp of every host (paper §2.4). The argument is in `docs/design.md` ("The oracle
//! service"); in short:
//!
//! - **Election.** Each [`OracleServer`] is a candidate. A candidate becomes leader by creating
//!   `<namespace>/oracle/leader` (holding its address) attached to its lease, and stays leader
//!   while it renews the lease. Others poll the key and try again once it is gone.
//! - **High-water mark.** The leader persists `<namespace>/oracle/hwm` above every timestamp
//!   before handing it out, in a transaction that also checks that the leader key still holds
//!   its lease. A new leader starts at the mark: above everything any earlier leader handed out.
//! - **Fencing.** A leader answers only while `now < sent + TTL − margin`, where `sent` is when
//!   it sent its last successful renewal: etcd keeps the lease at least TTL after receiving the
//!   renewal, so the old leader stops answering before etcd lets a new leader in. Timestamps
//!   therefore increase across leader changes in real time, not just in value.
//! - **Batching.** A [`RemoteOracle`] (one per host) keeps at most one request in flight and
//!   asks for as many timestamps as callers are waiting.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, sync_channel};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::etcd::{Compare, Etcd};
use percolator_store::Timestamp;
use percolator_store::{Error, Result};

/// Answer codes of the wire protocol: a request is a u32 (LE) count, an answer one code byte and
/// a u64 (LE) first timestamp.
const OK: u8 = 0;
const NOT_LEADER: u8 = 1;
const BAD_REQUEST: u8 = 2;

/// Most timestamps one request may ask for.
const MAX_BATCH: u32 = 1 << 20;

fn leader_key(namespace: &str) -> String {
    format!("{namespace}/oracle/leader")
}

fn hwm_key(namespace: &str) -> String {
    format!("{namespace}/oracle/hwm")
}

/// Settings of an oracle candidate.
#[derive(Clone, Debug)]
pub struct OracleServiceConfig {
    /// etcd client URLs (`http://host:port`).
    pub etcd: Vec<String>,
    /// Which store's oracle (one leader per namespace).
    pub namespace: String,
    /// Where to listen for timestamp requests when leader (port 0: any free port).
    pub listen: SocketAddr,
    /// The leader's lease: a dead leader is replaced after about this long.
    pub lease_ttl: Duration,
    /// How long before its lease could expire a leader stops answering (covers clock-rate
    /// differences between this host and etcd's).
    pub margin: Duration,
    /// Timestamps reserved per high-water-mark persist.
    pub range: u64,
}

impl Default for OracleServiceConfig {
    fn default() -> OracleServiceConfig {
        OracleServiceConfig {
            etcd: Vec::new(),
            namespace: "percolator".into(),
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            lease_ttl: Duration::from_secs(3),
            margin: Duration::from_secs(1),
            range: 1 << 20,
        }
    }
}

/// One leadership term.
struct Term {
    lease: i64,
    next: AtomicU64,
    /// Every timestamp below this is covered by the persisted mark.
    limit: AtomicU64,
    /// The mark's etcd revision; serializes persists.
    hwm_rev: Mutex<i64>,
    /// Answer only before this.
    serving_until: Mutex<Instant>,
    lost: AtomicBool,
}

impl Term {
    fn serving(&self) -> bool {
        !self.lost.load(Ordering::SeqCst) && self.serving_until.lock().is_ok_and(|u| Instant::now() < *u)
    }
}

struct ServerShared {
    config: OracleServiceConfig,
    etcd: Etcd,
    address: SocketAddr,
    term: RwLock<Option<Arc<Term>>>,
    stop: AtomicBool,
    /// Timestamps handed out by this candidate (all terms).
    issued: AtomicU64,
}

/// An oracle candidate: takes part in the election and, while leader, serves timestamps.
/// Stops (handing leadership over at once) when dropped.
pub struct OracleServer {
    shared: Arc<ServerShared>,
    threads: Vec<JoinHandle<()>>,
}

impl OracleServer {
    /// Starts listening and campaigning.
    pub fn start(config: OracleServiceConfig) -> Result<OracleServer> {
        let etcd = Etcd::new(&config.etcd, config.lease_ttl)?;
        let listener = TcpListener::bind(config.listen)
            .map_err(|e| Error::Unavailable(format!("oracle: cannot listen on {}: {e}", config.listen)))?;
        let address = listener.local_addr()?;
        let shared = Arc::new(ServerShared {
            config,
            etcd,
            address,
            term: RwLock::new(None),
            stop: AtomicBool::new(false),
            issued: AtomicU64::new(0),
        });
        let s = shared.clone();
        let campaign = std::thread::Builder::new()
            .name("percolator-oracle-election".into())
            .spawn(move || campaign(&s))
            .expect("spawning the oracle election thread");
        let s = shared.clone();
        let accept = std::thread::Builder::new()
            .name("percolator-oracle-accept".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    if s.stop.load(Ordering::SeqCst) {
                        return;
                    }
                    let Ok(conn) = conn else { continue };
                    let s = s.clone();
                    // A connection per host; a thread per connection is enough.
                    let _ = std::thread::Builder::new()
                        .name("percolator-oracle-conn".into())
                        .spawn(move || serve(&s, conn));
                }
            })
            .expect("spawning the oracle accept thread");
        Ok(OracleServer { shared, threads: vec![campaign, accept] })
    }

    /// Where this candidate answers.
    pub fn address(&self) -> SocketAddr {
        self.shared.address
    }

    /// Whether this candidate is the serving leader now.
    pub fn is_leader(&self) -> bool {
        self.shared.term.read().ok().and_then(|t| t.clone()).is_some_and(|t| t.serving())
    }

    /// The address of the elected leader of `namespace`'s oracle, if one is elected.
    pub fn current_leader(etcd: &[String], namespace: &str) -> Result<Option<String>> {
        let etcd = Etcd::new(etcd, Duration::from_secs(2))?;
        Ok(etcd.get(&leader_key(namespace))?.map(|kv| String::from_utf8_lossy(&kv.value).into_owned()))
    }

    /// Timestamps this candidate has handed out.
    pub fn issued(&self) -> u64 {
        self.shared.issued.load(Ordering::Relaxed)
    }
}

impl Drop for OracleServer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop.
        let _ = TcpStream::connect_timeout(&self.shared.address, Duration::from_millis(200));
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// Sleeps up to `d` in small steps; false if stopped meanwhile.
fn nap(s: &ServerShared, d: Duration) -> bool {
    let until = Instant::now() + d;
    while Instant::now() < until {
        if s.stop.load(Ordering::SeqCst) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20).min(until.saturating_duration_since(Instant::now())));
    }
    !s.stop.load(Ordering::SeqCst)
}

fn campaign(s: &ServerShared) {
    let (ttl, margin) = (s.config.lease_ttl, s.config.margin.min(s.config.lease_ttl / 2));
    let key = leader_key(&s.config.namespace);
    while !s.stop.load(Ordering::SeqCst) {
        let sent = Instant::now();
        let lease = match s.etcd.grant(ttl) {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "oracle: cannot reach etcd to campaign");
                nap(s, ttl / 3);
                continue;
            }
        };
        match s.etcd.create(&key, s.address.to_string().as_bytes(), lease) {
            Ok(true) => lead(s, lease, sent + ttl - margin),
            Ok(false) => {
                let _ = s.etcd.revoke(lease);
                nap(s, ttl / 3);
            }
            Err(e) => {
                tracing::warn!(error = %e, "oracle: campaigning failed");
                let _ = s.etcd.revoke(lease);
                nap(s, ttl / 3);
            }
        }
    }
}

/// One term as leader: read the mark, serve, renew, until the lease is lost or the server stops.
fn lead(s: &ServerShared, lease: i64, serving_until: Instant) {
    let (ttl, margin) = (s.config.lease_ttl, s.config.margin.min(s.config.lease_ttl / 2));
    let (start, rev) = match s.etcd.get(&hwm_key(&s.config.namespace)) {
        Ok(Some(kv)) => match std::str::from_utf8(&kv.value).ok().and_then(|v| v.parse::<u64>().ok()) {
            Some(v) => (v, kv.mod_revision),
            None => {
                tracing::error!(value = ?kv.value, "oracle: the high-water mark in etcd is not a number; not leading");
                let _ = s.etcd.revoke(lease);
                nap(s, ttl);
                return;
            }
        },
        Ok(None) => (1, 0),
        Err(e) => {
            tracing::warn!(error = %e, "oracle: elected but cannot read the high-water mark");
            let _ = s.etcd.revoke(lease);
            return;
        }
    };
    let term = Arc::new(Term {
        lease,
        next: AtomicU64::new(start.max(1)),
        limit: AtomicU64::new(start.max(1)),
        hwm_rev: Mutex::new(rev),
        serving_until: Mutex::new(serving_until),
        lost: AtomicBool::new(false),
    });
    tracing::info!(address = %s.address, from = start, "oracle: elected leader");
    if let Ok(mut t) = s.term.write() {
        *t = Some(term.clone());
    }
    while nap(s, ttl / 3) && term.serving() {
        let sent = Instant::now();
        match s.etcd.keepalive(lease) {
            Ok(Some(left)) => {
                if let Ok(mut u) = term.serving_until.lock() {
                    *u = sent + left.min(ttl) - margin;
                }
            }
            Ok(None) => break,
            Err(e) => tracing::warn!(error = %e, "oracle: renewing the leader lease failed; retrying"),
        }
    }
    term.lost.store(true, Ordering::SeqCst);
    if let Ok(mut t) = s.term.write() {
        *t = None;
    }
    if s.stop.load(Ordering::SeqCst) {
        // A clean stop hands over at once instead of after the TTL.
        let _ = s.etcd.revoke(lease);
    }
    tracing::info!(address = %s.address, "oracle: no longer leader");
}

/// Hands out `n` timestamps of `term`, persisting a mark above them first.
fn allocate(s: &ServerShared, term: &Term, n: u64) -> Option<u64> {
    if !term.serving() {
        return None;
    }
    let first = term.next.fetch_add(n, Ordering::SeqCst);
    let end = first + n;
    if end > term.limit.load(Ordering::SeqCst) {
        let mut rev = term.hwm_rev.lock().ok()?;
        if end > term.limit.load(Ordering::SeqCst) {
            let new_limit = term.next.load(Ordering::SeqCst).max(end) + s.config.range;
            let (lk, hk) = (leader_key(&s.config.namespace), hwm_key(&s.config.namespace));
            let compares = [Compare::Lease(&lk, term.lease), Compare::ModRevision(&hk, *rev)];
            match s.etcd.put_if(&compares, &hk, new_limit.to_string().as_bytes()) {
                Ok(Some(r)) => {
                    *rev = r;
                    term.limit.store(new_limit, Ordering::SeqCst);
                }
                Ok(None) => {
                    tracing::warn!("oracle: lost leadership while persisting the high-water mark");
                    term.lost.store(true, Ordering::SeqCst);
                    return None;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "oracle: persisting the high-water mark failed");
                    return None;
                }
            }
        }
    }
    // Checked again: the lease may have run out while the mark was persisted.
    if !term.serving() {
        return None;
    }
    s.issued.fetch_add(n, Ordering::Relaxed);
    Some(first)
}

fn serve(s: &ServerShared, mut conn: TcpStream) {
    let _ = conn.set_nodelay(true);
    let mut buf = [0u8; 4];
    while conn.read_exact(&mut buf).is_ok() {
        if s.stop.load(Ordering::SeqCst) {
            return;
        }
        let n = u32::from_le_bytes(buf);
        let (code, first) = if n == 0 || n > MAX_BATCH {
            (BAD_REQUEST, 0)
        } else {
            let term = s.term.read().ok().and_then(|t| t.clone());
            match term.and_then(|t| allocate(s, &t, n as u64)) {
                Some(first) => (OK, first),
                None => (NOT_LEADER, 0),
            }
        };
        let mut answer = [0u8; 9];
        answer[0] = code;
        answer[1..].copy_from_slice(&first.to_le_bytes());
        if conn.write_all(&answer).is_err() {
            return;
        }
    }
}

// ---- the client ------------------------------------------------------------------------------

/// What a waiting caller gets.
type Reply = std::result::Result<u64, String>;

struct ClientShared {
    etcd: Etcd,
    namespace: String,
    queue: Mutex<Vec<SyncSender<Reply>>>,
    cv: Condvar,
    stop: AtomicBool,
    /// How long a request is retried (through a leader change) before callers get an error.
    retry_for: Duration,
}

/// A host's client of the oracle service: one connection to the leader, one request in flight,
/// each asking for as many timestamps as callers wait for.
pub(crate) struct RemoteOracle {
    shared: Arc<ClientShared>,
    thread: Option<JoinHandle<()>>,
}

impl RemoteOracle {
    pub(crate) fn connect(etcd: &[String], namespace: &str) -> Result<RemoteOracle> {
        let shared = Arc::new(ClientShared {
            etcd: Etcd::new(etcd, Duration::from_secs(2))?,
            namespace: namespace.to_string(),
            queue: Mutex::new(Vec::new()),
            cv: Condvar::new(),
            stop: AtomicBool::new(false),
            retry_for: Duration::from_secs(15),
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("percolator-oracle-client".into())
            .spawn(move || client_loop(&s))
            .expect("spawning the oracle client thread");
        Ok(RemoteOracle { shared, thread: Some(thread) })
    }

    pub(crate) fn next(&self) -> Result<Timestamp> {
        let (tx, rx) = sync_channel(1);
        self.shared.queue.lock().map_err(|_| Error::Closed)?.push(tx);
        self.shared.cv.notify_one();
        match rx.recv() {
            Ok(Ok(t)) => Ok(Timestamp::from_raw(t)),
            Ok(Err(e)) => Err(Error::Unavailable(e)),
            Err(_) => Err(Error::Closed),
        }
    }
}

impl Drop for RemoteOracle {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.cv.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn client_loop(s: &ClientShared) {
    let mut conn: Option<TcpStream> = None;
    loop {
        let waiting = {
            let Ok(mut q) = s.queue.lock() else { return };
            while q.is_empty() && !s.stop.load(Ordering::SeqCst) {
                q = match s.cv.wait(q) {
                    Ok(q) => q,
                    Err(_) => return,
                };
            }
            if q.is_empty() {
                return;
            }
            std::mem::take(&mut *q)
        };
        match request(s, &mut conn, waiting.len() as u32) {
            Ok(first) => {
                for (i, w) in waiting.into_iter().enumerate() {
                    let _ = w.send(Ok(first + i as u64));
                }
            }
            Err(e) => {
                for w in waiting {
                    let _ = w.send(Err(e.clone()));
                }
            }
        }
    }
}

/// Asks the leader for `n` timestamps, finding it (again) through etcd as needed.
fn request(s: &ClientShared, conn: &mut Option<TcpStream>, n: u32) -> std::result::Result<u64, String> {
    let deadline = Instant::now() + s.retry_for;
    let mut last = String::new();
    let mut backoff = Duration::from_millis(20);
    loop {
        if conn.is_none() {
            match find_leader(s) {
                Ok(c) => *conn = Some(c),
                Err(e) => last = e,
            }
        }
        if let Some(c) = conn.as_mut() {
            let mut answer = [0u8; 9];
            match c.write_all(&n.to_le_bytes()).and_then(|()| c.read_exact(&mut answer)) {
                Ok(()) if answer[0] == OK => {
                    return Ok(u64::from_le_bytes(answer[1..].try_into().expect("8 bytes")));
                }
                Ok(()) => last = format!("the oracle at {:?} is not (or no longer) the leader", c.peer_addr().ok()),
                Err(e) => last = format!("the oracle at {:?}: {e}", c.peer_addr().ok()),
            }
            *conn = None;
        }
        if Instant::now() >= deadline || s.stop.load(Ordering::SeqCst) {
            return Err(format!("no timestamp oracle answered within {:?}: {last}", s.retry_for));
        }
        std::thread::sleep(backoff);
        backoff = (backoff * 2).min(Duration::from_millis(250));
    }
}

fn find_leader(s: &ClientShared) -> std::result::Result<TcpStream, String> {
    let kv = s.etcd.get(&leader_key(&s.namespace)).map_err(|e| e.to_string())?.ok_or_else(|| {
        format!("no oracle leader is elected for namespace {:?} (is an oracle running?)", s.namespace)
    })?;
    let addr: SocketAddr = std::str::from_utf8(&kv.value)
        .ok()
        .and_then(|a| a.parse().ok())
        .ok_or_else(|| format!("the oracle leader key holds no address: {:?}", kv.value))?;
    let c =
        TcpStream::connect_timeout(&addr, Duration::from_secs(1)).map_err(|e| format!("the oracle at {addr}: {e}"))?;
    let _ = c.set_nodelay(true);
    let _ = c.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = c.set_write_timeout(Some(Duration::from_secs(5)));
    Ok(c)
}
