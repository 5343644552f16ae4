//! The coordination of hosts that share a backend: timestamps from the oracle service
//! (`oracle_service.rs`: one elected leader hands out every timestamp) and worker leases in
//! etcd (the key `<namespace>/workers/<id>` attached to an etcd lease of the worker, which etcd
//! expires on its own clock).

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::etcd::Etcd;
use crate::oracle_service::{OracleServer, OracleServiceConfig, RemoteOracle};
use percolator_store::Result;
use percolator_store::Timestamp;
use percolator_store::backends::{Coordination, Published, Renewed, decode_lease, encode_lease};

/// Milliseconds since the Unix epoch.
fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// The coordination of the hosts sharing a backend: a client of the oracle service of a
/// namespace, found through etcd, and this worker's lease in etcd. Any number of stores may use
/// one backend with it (each with its own). Give it to [`Oracle::new`](percolator_store::Oracle::new).
pub struct EtcdCoordination {
    /// Dropped before the candidate.
    client: RemoteOracle,
    /// This process's own candidate for leader, if it runs one.
    candidate: Option<OracleServer>,
    /// What the store records in the backend (`Coordination::shared`).
    service: String,
    leases: Etcd,
    /// Keys of the worker leases: `<namespace>/workers/`.
    prefix: String,
    /// This worker's etcd lease (0: none yet; replaced if it ever expires).
    lease: AtomicI64,
}

impl EtcdCoordination {
    /// A client of the oracle service of `namespace`, found through etcd at `etcd`
    /// (`http://host:port`). Each timestamp waits for one request to the service; concurrent
    /// callers share one.
    pub fn connect(etcd: &[String], namespace: &str) -> Result<EtcdCoordination> {
        Self::of(RemoteOracle::connect(etcd, namespace)?, None, etcd, namespace)
    }

    /// Like [`EtcdCoordination::connect`], with this process also standing as a candidate for
    /// leader (what a host does, so that the service lives as long as any host does). The
    /// candidate stops, handing leadership over, when the coordination is dropped.
    pub fn with_candidate(config: OracleServiceConfig) -> Result<EtcdCoordination> {
        let client = RemoteOracle::connect(&config.etcd, &config.namespace)?;
        let (etcd, namespace) = (config.etcd.clone(), config.namespace.clone());
        let server = OracleServer::start(config)?;
        Self::of(client, Some(server), &etcd, &namespace)
    }

    fn of(
        client: RemoteOracle,
        candidate: Option<OracleServer>,
        etcd: &[String],
        namespace: &str,
    ) -> Result<EtcdCoordination> {
        let leases = Etcd::new(etcd, Duration::from_secs(2))?;
        Ok(EtcdCoordination {
            service: format!("etcd {} namespace {namespace}", leases.endpoints().join(",")),
            client,
            candidate,
            leases,
            prefix: format!("{namespace}/workers/"),
            lease: AtomicI64::new(0),
        })
    }

    /// This process's candidate, if it runs one.
    pub fn candidate(&self) -> Option<&OracleServer> {
        self.candidate.as_ref()
    }
}

impl Coordination for EtcdCoordination {
    fn next_timestamp(&self) -> Result<Timestamp> {
        self.client.next()
    }

    fn shared(&self) -> Option<String> {
        Some(self.service.clone())
    }

    fn write_lease(&self, worker: u64, period: Duration, published: Published) -> Result<Option<Renewed>> {
        let sent = now_ms();
        let mut id = self.lease.load(Ordering::SeqCst);
        let granted = id == 0;
        if granted {
            id = self.leases.grant(period)?;
            self.lease.store(id, Ordering::SeqCst);
        }
        // etcd expires the key: the value's own expiry never does.
        self.leases.put(&format!("{}{worker:020}", self.prefix), &encode_lease(u64::MAX, published), id)?;
        // etcd's TTL is whole seconds (rounded down, as `grant` asks).
        let expiry = sent + period.as_secs().max(1) * 1000;
        Ok(granted.then_some(Renewed { sent, expiry }))
    }

    fn keep_alive(&self, worker: u64) -> Result<Option<Renewed>> {
        let id = self.lease.load(Ordering::SeqCst);
        let sent = now_ms();
        if id == 0 {
            return Ok(None);
        }
        match self.leases.keepalive(id)? {
            Some(ttl) => Ok(Some(Renewed { sent, expiry: sent + ttl.as_millis() as u64 })),
            None => {
                tracing::error!(
                    worker,
                    "the worker's etcd lease expired (the process stalled for a lease period); taking a new one"
                );
                self.lease.store(0, Ordering::SeqCst);
                Ok(None)
            }
        }
    }

    fn live_leases(&self) -> Result<Vec<(u64, Published)>> {
        let now = now_ms();
        let mut out = Vec::new();
        for (key, value) in self.leases.range_prefix(&self.prefix)? {
            let Some(Ok(id)) = key.strip_prefix(self.prefix.as_str()).map(str::parse::<u64>) else { continue };
            if let Some((expiry, published)) = decode_lease(&value)
                && expiry > now
            {
                out.push((id, published));
            }
        }
        Ok(out)
    }

    fn lease_alive(&self, worker: u64) -> Result<bool> {
        let value = self.leases.get(&format!("{}{worker:020}", self.prefix))?.map(|kv| kv.value);
        Ok(value.and_then(|v| decode_lease(&v)).is_some_and(|(expiry, _)| expiry > now_ms()))
    }

    fn revoke_lease(&self, _worker: u64) -> Result<()> {
        match self.lease.swap(0, Ordering::SeqCst) {
            0 => Ok(()),
            id => self.leases.revoke(id),
        }
    }
}
