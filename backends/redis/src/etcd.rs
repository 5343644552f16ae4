//! A small etcd v3 client over etcd's JSON gateway (`POST /v3/...`, etcd 3.4): leases, gets,
//! and compare-and-put transactions — what the oracle's election and high-water mark need of
//! the Chubby analog. Synchronous (the store is), on `ureq`, with no code generation.
//!
//! Requests go to the endpoint that last answered; a connection failure moves on to the next
//! one, so a dead member is skipped. etcd answers a request only through a quorum, so whichever
//! member answers, the answer is linearizable.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::{Value, json};

use percolator_store::{Error, Result};

/// A key's value and revisions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Kv {
    pub(crate) value: Vec<u8>,
    pub(crate) mod_revision: i64,
    pub(crate) lease: i64,
}

/// A condition of a transaction.
pub(crate) enum Compare<'a> {
    /// The key is attached to this lease (false when the key is absent).
    Lease(&'a str, i64),
    /// The key's last modification is at this revision (0: the key is absent).
    ModRevision(&'a str, i64),
}

pub(crate) struct Etcd {
    endpoints: Vec<String>,
    agent: ureq::Agent,
    /// Index of the endpoint that answered last.
    current: AtomicUsize,
}

fn b64(b: &[u8]) -> String {
    B64.encode(b)
}

/// An int64 of the gateway's JSON (written as a string).
fn int(v: &Value) -> i64 {
    match v {
        Value::String(s) => s.parse().unwrap_or(0),
        Value::Number(n) => n.as_i64().unwrap_or(0),
        _ => 0,
    }
}

impl Etcd {
    /// A client of the cluster at `endpoints` (`http://host:port`); `timeout` bounds each request.
    pub(crate) fn new(endpoints: &[String], timeout: Duration) -> Result<Etcd> {
        if endpoints.is_empty() {
            return Err(Error::InvalidArgument("no etcd endpoint given (http://host:port)".into()));
        }
        for e in endpoints {
            if !(e.starts_with("http://") || e.starts_with("https://")) {
                return Err(Error::InvalidArgument(format!("etcd endpoint {e:?} is not an http:// URL")));
            }
        }
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .proxy(None)
            .timeout_global(Some(timeout))
            .build()
            .into();
        Ok(Etcd {
            endpoints: endpoints.iter().map(|e| e.trim_end_matches('/').to_string()).collect(),
            agent,
            current: AtomicUsize::new(0),
        })
    }

    /// POSTs `body` to `path` on the first endpoint that answers.
    fn post(&self, path: &str, body: &Value) -> Result<Value> {
        let start = self.current.load(Ordering::Relaxed);
        let mut errors = Vec::new();
        for k in 0..self.endpoints.len() {
            let i = (start + k) % self.endpoints.len();
            let url = format!("{}{path}", self.endpoints[i]);
            match self.agent.post(&url).header("Content-Type", "application/json").send(body.to_string().as_bytes()) {
                Ok(mut resp) => {
                    let status = resp.status().as_u16();
                    let text = resp
                        .body_mut()
                        .read_to_string()
                        .map_err(|e| Error::Unavailable(format!("etcd at {url}: reading the answer: {e}")))?;
                    if status != 200 {
                        // A member without a quorum, or a request etcd refuses: try the next.
                        errors.push(format!("{url}: HTTP {status}: {}", text.trim()));
                        continue;
                    }
                    self.current.store(i, Ordering::Relaxed);
                    return serde_json::from_str(&text).map_err(|e| {
                        Error::Storage(format!("etcd at {url} answered something that is not JSON: {e}"))
                    });
                }
                Err(e) => errors.push(format!("{url}: {e}")),
            }
        }
        Err(Error::Unavailable(format!("no etcd member answered: {}", errors.join("; "))))
    }

    /// Grants a lease of `ttl`; its ID.
    pub(crate) fn grant(&self, ttl: Duration) -> Result<i64> {
        let v = self.post("/v3/lease/grant", &json!({ "TTL": ttl.as_secs().max(1) }))?;
        match int(&v["ID"]) {
            0 => Err(Error::Storage(format!("etcd granted no lease: {v}"))),
            id => Ok(id),
        }
    }

    /// Renews a lease; its remaining TTL, or `None` if it has expired.
    pub(crate) fn keepalive(&self, lease: i64) -> Result<Option<Duration>> {
        let v = self.post("/v3/lease/keepalive", &json!({ "ID": lease.to_string() }))?;
        Ok(match int(&v["result"]["TTL"]) {
            ttl if ttl > 0 => Some(Duration::from_secs(ttl as u64)),
            _ => None,
        })
    }

    /// Revokes a lease (its keys go with it).
    pub(crate) fn revoke(&self, lease: i64) -> Result<()> {
        self.post("/v3/lease/revoke", &json!({ "ID": lease.to_string() }))?;
        Ok(())
    }

    /// The endpoints this client uses.
    pub(crate) fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    /// Puts `key = value` attached to `lease`.
    pub(crate) fn put(&self, key: &str, value: &[u8], lease: i64) -> Result<()> {
        self.post(
            "/v3/kv/put",
            &json!({ "key": b64(key.as_bytes()), "value": b64(value), "lease": lease.to_string() }),
        )?;
        Ok(())
    }

    /// Every key starting with `prefix`, with its value, in key order.
    pub(crate) fn range_prefix(&self, prefix: &str) -> Result<Vec<(String, Vec<u8>)>> {
        // The range end of a prefix: the prefix with its last byte incremented (no prefix used
        // here ends in 0xFF).
        let mut end = prefix.as_bytes().to_vec();
        if let Some(last) = end.last_mut() {
            *last += 1;
        }
        let v = self.post("/v3/kv/range", &json!({ "key": b64(prefix.as_bytes()), "range_end": b64(&end) }))?;
        Ok(v["kvs"]
            .as_array()
            .map(|kvs| {
                kvs.iter()
                    .filter_map(|kv| {
                        let key = kv["key"].as_str().and_then(|s| B64.decode(s).ok())?;
                        let value = kv["value"].as_str().and_then(|s| B64.decode(s).ok()).unwrap_or_default();
                        Some((String::from_utf8(key).ok()?, value))
                    })
                    .collect()
            })
            .unwrap_or_default())
    }

    /// Reads one key.
    pub(crate) fn get(&self, key: &str) -> Result<Option<Kv>> {
        let v = self.post("/v3/kv/range", &json!({ "key": b64(key.as_bytes()) }))?;
        Ok(v["kvs"].as_array().and_then(|a| a.first()).map(|kv| Kv {
            value: kv["value"].as_str().and_then(|s| B64.decode(s).ok()).unwrap_or_default(),
            mod_revision: int(&kv["mod_revision"]),
            lease: int(&kv["lease"]),
        }))
    }

    /// Creates `key` with `value` attached to `lease` if the key does not exist; whether it did.
    pub(crate) fn create(&self, key: &str, value: &[u8], lease: i64) -> Result<bool> {
        let k = b64(key.as_bytes());
        let v = self.post(
            "/v3/kv/txn",
            &json!({
                "compare": [{ "target": "CREATE", "key": k, "create_revision": "0" }],
                "success": [{ "request_put": { "key": k, "value": b64(value), "lease": lease.to_string() } }],
            }),
        )?;
        Ok(v["succeeded"].as_bool().unwrap_or(false))
    }

    /// Puts `key = value` if every comparison holds; the new revision, or `None` if one failed.
    pub(crate) fn put_if(&self, compares: &[Compare<'_>], key: &str, value: &[u8]) -> Result<Option<i64>> {
        let compare: Vec<Value> = compares
            .iter()
            .map(|c| match c {
                Compare::Lease(k, lease) => {
                    json!({ "target": "LEASE", "key": b64(k.as_bytes()), "lease": lease.to_string() })
                }
                Compare::ModRevision(k, rev) => {
                    json!({ "target": "MOD", "key": b64(k.as_bytes()), "mod_revision": rev.to_string() })
                }
            })
            .collect();
        let v = self.post(
            "/v3/kv/txn",
            &json!({
                "compare": compare,
                "success": [{ "request_put": { "key": b64(key.as_bytes()), "value": b64(value) } }],
            }),
        )?;
        Ok(if v["succeeded"].as_bool().unwrap_or(false) { Some(int(&v["header"]["revision"])) } else { None })
    }
}
