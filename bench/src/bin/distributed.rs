//! The distributed mode against the real alternative on the same Redis Cluster (the paper's
//! Figure 8, and §2.4's oracle figure), side by side in one run:
//!
//! 1. **Get**: Percolator `get` (a long-lived transaction, random preloaded rows) against a raw
//!    Redis `GET` of a preloaded key, one client thread, one request at a time.
//! 2. **One-cell write**: a Percolator transaction writing one cell (two oracle requests, a
//!    prewrite and a commit, each one `percolator_apply` call plus `WAIT 1`) against one raw
//!    `SET` plus `WAIT 1` at the same durability (the cluster's `appendfsync always`, one
//!    replica acknowledging).
//! 3. **Oracle**: timestamps per second from 64 threads on one host's client, and from 4
//!    clients (hosts) × 16 threads, the leader in this process.
//!
//! Needs a cluster: `scripts/dev-cluster up`, then `set -a; . target/dev-cluster/env; set +a`
//! and `cargo run --release -p percolator-bench --bin distributed` (about a minute).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use percolator_redis::{EtcdCoordination, OracleServer, OracleServiceConfig, RedisBigtable, RedisConfig};
use percolator_store::{Oracle, Store, StoreConfig};
use redis::{Connection, Value};

#[path = "../cluster.rs"]
mod cluster;
use cluster::{Res, env_list, print};

const ROWS: usize = 2000;
const VALUE: [u8; 16] = *b"0123456789abcdef";

/// Operations per second of `op` over `dur` (after a short warm-up), best of `rounds`.
fn rate(rounds: usize, dur: Duration, mut op: impl FnMut() -> Res<()>) -> Res<f64> {
    let mut best = 0f64;
    for _ in 0..rounds {
        let warm = Instant::now();
        while warm.elapsed() < dur / 10 {
            op()?;
        }
        let (start, mut n) = (Instant::now(), 0u64);
        while start.elapsed() < dur {
            op()?;
            n += 1;
        }
        best = best.max(n as f64 / start.elapsed().as_secs_f64());
    }
    Ok(best)
}

/// A raw connection to the master that serves `key` (following one MOVED redirection).
fn raw_connection(seed: &str, key: &str) -> Res<Connection> {
    let mut con = redis::Client::open(format!("redis://{seed}/"))?.get_connection()?;
    match redis::cmd("GET").arg(key).query::<Value>(&mut con) {
        Ok(Value::ServerError(e)) if e.code() == "MOVED" => {
            let addr = e.details().and_then(|d| d.split_whitespace().last()).ok_or("MOVED without an address")?;
            let url = format!("redis://{addr}/");
            Ok(redis::Client::open(url.as_str()).map_err(|err| format!("{url}: {err}"))?.get_connection()?)
        }
        Err(e) if e.redirect_node().is_some() => {
            // The crate gives the node as "host:port" (and the slot as the number).
            let (node, _slot) = e.redirect_node().expect("checked");
            let url = format!("redis://{node}/");
            Ok(redis::Client::open(url.as_str()).map_err(|err| format!("{url}: {err}"))?.get_connection()?)
        }
        _ => Ok(con),
    }
}

fn main() -> Res<()> {
    let quick = std::env::args().any(|a| a == "--quick");
    let (rounds, dur) = if quick { (1, Duration::from_secs(1)) } else { (3, Duration::from_secs(3)) };
    let nodes = env_list("PERCOLATOR_REDIS")?;
    let etcd = env_list("PERCOLATOR_ETCD")?;
    let namespace = format!("bench-{}", std::process::id());
    println!("# percolator-bench distributed: Redis Cluster {}, etcd {}", nodes.join(","), etcd.join(","));

    let backend = Arc::new(RedisBigtable::open(RedisConfig {
        nodes: nodes.clone(),
        namespace: namespace.clone(),
        ..RedisConfig::default()
    })?);
    let oracle = EtcdCoordination::with_candidate(OracleServiceConfig {
        etcd: etcd.clone(),
        namespace: namespace.clone(),
        ..OracleServiceConfig::default()
    })
    .map(Oracle::new)?;
    let store = Store::with_oracle(backend, oracle, StoreConfig::default())?;
    // Preload: Percolator rows, and raw keys under one hash tag (one master, as each
    // Percolator row is).
    for chunk in (0..ROWS).collect::<Vec<_>>().chunks(200) {
        store.run(|t| {
            for &i in chunk {
                t.set("t", format!("row{i:06}"), "c:v", VALUE)?;
            }
            Ok(())
        })?;
    }
    let raw_key = |i: usize| format!("{{{namespace}-raw}}k{i:06}");
    let mut raw = raw_connection(&nodes[0], &raw_key(0))?;
    for i in 0..ROWS {
        redis::cmd("SET").arg(raw_key(i)).arg(&VALUE[..]).exec(&mut raw)?;
    }
    let mut n = 0x9E37_79B9_7F4A_7C15u64;
    let mut pick = move || {
        n ^= n << 13;
        n ^= n >> 7;
        n ^= n << 17;
        (n % ROWS as u64) as usize
    };

    // 1. Get.
    let txn = store.begin()?;
    let perc_get = rate(rounds, dur, || {
        txn.get("t", format!("row{:06}", pick()), "c:v")?.ok_or("missing row")?;
        Ok(())
    })?;
    drop(txn);
    let raw_get = rate(rounds, dur, || {
        let v: Option<Vec<u8>> = redis::cmd("GET").arg(raw_key(pick())).query(&mut raw)?;
        v.ok_or("missing key")?;
        Ok(())
    })?;
    print("get_percolator_per_s", perc_get);
    print("get_raw_redis_per_s", raw_get);
    print("get_ratio", perc_get / raw_get);
    println!("# goal: get ratio >= 0.9 (paper: Percolator reads cost about what Bigtable reads do)");

    // 2. One-cell write at the same durability.
    let mut i = 0usize;
    let perc_write = rate(rounds, dur, || {
        i += 1;
        store.run(|t| t.set("t", format!("w{i:08}"), "c:v", VALUE))?;
        Ok(())
    })?;
    let raw_write = rate(rounds, dur, || {
        i += 1;
        let (_, acked): ((), i64) = redis::pipe()
            .cmd("SET")
            .arg(raw_key(i % ROWS))
            .arg(&VALUE[..])
            .cmd("WAIT")
            .arg(1)
            .arg(2000)
            .query(&mut raw)?;
        if acked < 1 {
            return Err("WAIT: no replica acknowledged".into());
        }
        Ok(())
    })?;
    print("write_1cell_percolator_per_s", perc_write);
    print("write_raw_redis_set_wait_per_s", raw_write);
    print("write_ratio", perc_write / raw_write);
    println!("# goal: write ratio >= 0.25 (paper Figure 8: 0.23)");

    // 3. The oracle: one host's client with 64 callers, then 4 clients x 16 callers.
    let oracle_rate = |clients: usize, threads: usize| -> Res<f64> {
        let oracles: Vec<Oracle> = (0..clients)
            .map(|_| EtcdCoordination::connect(&etcd, &namespace).map(Oracle::new))
            .collect::<Result<_, _>>()?;
        let stop = AtomicBool::new(false);
        let count = AtomicU64::new(0);
        let start = Instant::now();
        std::thread::scope(|s| {
            for o in &oracles {
                for _ in 0..threads {
                    let (stop, count) = (&stop, &count);
                    s.spawn(move || {
                        let mut mine = 0u64;
                        while !stop.load(Ordering::Relaxed) {
                            if o.next().is_ok() {
                                mine += 1;
                            }
                        }
                        count.fetch_add(mine, Ordering::Relaxed);
                    });
                }
            }
            std::thread::sleep(dur);
            stop.store(true, Ordering::Relaxed);
        });
        Ok(count.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64())
    };
    let leader = OracleServer::current_leader(&etcd, &namespace)?.ok_or("no oracle leader")?;
    println!("# oracle leader {leader}");
    print("oracle_1client_64t_ts_per_s", oracle_rate(1, 64)?);
    print("oracle_4clients_16t_ts_per_s", oracle_rate(4, 16)?);
    // The leader's own capacity, without the callers' thread wake-ups: one connection asking
    // for batches of 64 (what a client with 64 waiting callers sends), back to back.
    let server_rate = {
        use std::io::{Read, Write};
        let mut c = std::net::TcpStream::connect(&leader)?;
        c.set_nodelay(true)?;
        let mut answer = [0u8; 9];
        let per_s = rate(rounds, dur, || {
            c.write_all(&64u32.to_le_bytes())?;
            c.read_exact(&mut answer)?;
            if answer[0] != 0 {
                return Err("the oracle refused".into());
            }
            Ok(())
        })?;
        per_s * 64.0
    };
    print("oracle_server_batches_of_64_ts_per_s", server_rate);
    println!("# goal: >= 2M timestamps/s with 64 concurrent callers (paper: 2M/s from one machine)");
    Ok(())
}
