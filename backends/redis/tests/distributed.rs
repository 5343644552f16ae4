//! Several hosts on one Percolator: three processes, each a store over one Redis Cluster
//! namespace with the shared oracle service (each also an oracle candidate), transfer money
//! between accounts while (a) a host is SIGKILLed and restarted, (b) the oracle leader's host
//! is SIGKILLed, (c) a Redis master is SIGKILLed and its replica promoted. Afterwards the total
//! is unchanged, every transfer a host saw commit is present, and no timestamp was issued twice.
//! Also: GC on one host keeps what another host's running transaction reads.
//!
//! Needs the dev cluster (`PERCOLATOR_REDIS`, `PERCOLATOR_ETCD`, and for (c)
//! `PERCOLATOR_DEV_CLUSTER_DIR`); skipped without it unless `PERCOLATOR_REQUIRE_REDIS` is set.

use percolator_testkit as common;

use std::collections::BTreeSet;
use std::io::Write;
use std::path::Path;
use std::process::Child;
use std::sync::Mutex;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use common::*;
use percolator_redis::{EtcdCoordination, OracleServer, RedisBigtable, RedisConfig};
use percolator_store::backends::{Bigtable, Mutation, Op, RowMutation};
use percolator_store::{StoreConfig, Timestamp};

const ACCOUNTS: u64 = 8;
const INITIAL: u64 = 1000;
const ENV: &str = "PERCOLATOR_DISTRIBUTED_NAMESPACE";

/// The tests of this file kill servers of the shared cluster: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// A host's store: the namespace on the cluster, the oracle service (this process a candidate).
fn open_host(namespace: &str) -> TestStore {
    shared_store(namespace, StoreConfig { lock_ttl: Duration::from_millis(500), ..StoreConfig::default() })
}

/// The child: a host doing transfers from 3 threads until killed, printing its oracle
/// candidate's address and every transfer that committed.
#[test]
#[ignore = "run by bank_transfers_from_three_hosts_survive_kills as a child process"]
fn host_child() {
    let Ok(namespace) = std::env::var(ENV) else { return };
    let store = open_host(&namespace);
    let out = Mutex::new(std::io::stdout());
    writeln!(
        out.lock().unwrap(),
        "\nORACLE {}",
        store.oracle().coordination::<EtcdCoordination>().and_then(|c| c.candidate()).unwrap().address()
    )
    .unwrap();
    let seed = std::process::id() as u64;
    std::thread::scope(|s| {
        for w in 0..3u64 {
            let (store, out) = (&store, &out);
            s.spawn(move || {
                let mut n = seed * 7 + w;
                let mut id = 0u64;
                loop {
                    n = n.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    let from = (n >> 33) % ACCOUNTS;
                    let to = (from + 1 + (n >> 40) % (ACCOUNTS - 1)) % ACCOUNTS;
                    id += 1;
                    let key = format!("{seed}-{w}-{id}");
                    let r = store.begin().and_then(|mut t| {
                        let a = get_u64(&t, "bank", &format!("acct{from}"), "bal:data")?;
                        let b = get_u64(&t, "bank", &format!("acct{to}"), "bal:data")?;
                        let amount = ((n >> 52) % 20).min(a);
                        set_u64(&mut t, "bank", &format!("acct{from}"), "bal:data", a - amount)?;
                        set_u64(&mut t, "bank", &format!("acct{to}"), "bal:data", b + amount)?;
                        t.set("log", key.as_str(), "t:amount", amount.to_be_bytes())?;
                        let start = t.start_ts();
                        t.commit().map(|c| (start, c))
                    });
                    // Conflicts, and commits whose outcome is unknown (a master failing over),
                    // are not reported: only what certainly committed.
                    if let Ok((start, commit)) = r {
                        let mut o = out.lock().unwrap();
                        writeln!(o, "\nCOMMITTED {key} {} {}", start.raw(), commit.raw()).unwrap();
                        o.flush().unwrap();
                    }
                }
            });
        }
    });
}

struct Host {
    child: Child,
    oracle: String,
    lines: Receiver<String>,
}

impl Host {
    fn start(namespace: &str) -> Host {
        let (child, lines) = spawn_child_test("host_child", ENV, namespace);
        let oracle = loop {
            let line = lines.recv_timeout(Duration::from_secs(60)).expect("the host child did not start");
            if let Some(a) = line.strip_prefix("ORACLE ") {
                break a.to_string();
            }
        };
        Host { child, oracle, lines }
    }

    /// SIGKILL; the lines it printed.
    fn kill(mut self) -> Vec<String> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // The reader ends at EOF; collect what is left.
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut out = Vec::new();
        while let Ok(l) = self.lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            out.push(l);
        }
        out
    }
}

#[test]
fn bank_transfers_from_three_hosts_survive_kills() {
    if redis_nodes().is_none() || etcd_endpoints().is_none() {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let namespace = unique_namespace();
    {
        let seed = open_host(&namespace);
        seed.run(|t| {
            for i in 0..ACCOUNTS {
                set_u64(t, "bank", &format!("acct{i}"), "bal:data", INITIAL)?;
            }
            Ok(())
        })
        .unwrap();
    }
    let mut hosts: Vec<Host> = (0..3).map(|_| Host::start(&namespace)).collect();
    let mut lines: Vec<String> = Vec::new();
    let settle = || std::thread::sleep(Duration::from_millis(1500));
    settle();
    // (a) A host killed and restarted.
    lines.extend(hosts.remove(0).kill());
    hosts.push(Host::start(&namespace));
    settle();
    // (b) The oracle leader's host killed (and replaced).
    let leader = OracleServer::current_leader(&etcd_endpoints().unwrap(), &namespace).unwrap().expect("a leader");
    let i = hosts.iter().position(|h| h.oracle == leader).expect("the leader is one of the hosts");
    lines.extend(hosts.remove(i).kill());
    hosts.push(Host::start(&namespace));
    settle();
    // (c) A Redis master killed: its replica takes over; the old master comes back as a replica.
    match std::env::var("PERCOLATOR_DEV_CLUSTER_DIR") {
        Ok(dir) => {
            let dir = Path::new(&dir);
            let name = first_master(dir);
            dev_cluster(dir, &["kill", &name]);
            dev_cluster(dir, &["wait-ok"]);
            settle();
            dev_cluster(dir, &["start", &name]);
            dev_cluster(dir, &["wait-ok"]);
        }
        Err(_) => {
            assert!(std::env::var("PERCOLATOR_REQUIRE_REDIS").is_err(), "PERCOLATOR_DEV_CLUSTER_DIR is needed");
            eprintln!("PERCOLATOR_DEV_CLUSTER_DIR not set: no Redis master is killed");
        }
    }
    settle();
    for h in hosts {
        lines.extend(h.kill());
    }

    let mut committed = Vec::new();
    let mut timestamps = BTreeSet::new();
    for l in lines.iter().filter(|l| l.starts_with("COMMITTED ")) {
        let parts: Vec<&str> = l.split(' ').collect();
        let (start, commit): (u64, u64) = (parts[2].parse().unwrap(), parts[3].parse().unwrap());
        assert!(start < commit, "{l}");
        for ts in [start, commit] {
            assert!(timestamps.insert(ts), "timestamp {ts} issued twice");
        }
        committed.push(parts[1].to_string());
    }
    assert!(committed.len() > 20, "only {} transfers committed", committed.len());
    let check = open_host(&namespace);
    let t = check.begin().unwrap();
    assert!(t.start_ts().raw() > *timestamps.last().unwrap());
    let total: u64 = (0..ACCOUNTS).map(|i| get_u64(&t, "bank", &format!("acct{i}"), "bal:data").unwrap()).sum();
    assert_eq!(total, ACCOUNTS * INITIAL, "the total changed");
    for key in &committed {
        assert!(t.get("log", key.as_str(), "t:amount").unwrap().is_some(), "committed transfer {key} is lost");
    }
    eprintln!("{} transfers committed by 5 host processes", committed.len());
}

/// GC run by one host keeps the version another host's running transaction reads.
#[test]
fn gc_on_one_host_keeps_what_another_host_reads() {
    if redis_nodes().is_none() || etcd_endpoints().is_none() {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let namespace = unique_namespace();
    let a = open_host(&namespace);
    let b = open_host(&namespace);
    a.run(|t| t.set("t", "r", "c:v", "old")).unwrap();
    let reader = a.begin().unwrap();
    b.run(|t| t.set("t", "r", "c:v", "new")).unwrap();
    // Wait for a's heartbeat to publish its running transaction's start.
    std::thread::sleep(StoreConfig::default().worker_lease / 3 + Duration::from_millis(500));
    b.gc().unwrap();
    assert_eq!(reader.get("t", "r", "c:v").unwrap(), Some(b"old".to_vec()), "GC removed a version a host reads");
    drop(reader);
    assert_eq!(b.begin().unwrap().get("t", "r", "c:v").unwrap(), Some(b"new".to_vec()));
}

/// After a master dies its promoted replica has no replica of its own: with the default,
/// commits on its slots fail (`WAIT 1` is never met) until a replica joins it; with
/// `degraded_writes` they wait only for the replicas it has, and succeed.
#[test]
fn a_master_without_its_replica_takes_commits_only_with_degraded_writes() {
    let (Some(nodes), Ok(dir)) = (redis_nodes(), std::env::var("PERCOLATOR_DEV_CLUSTER_DIR")) else {
        assert!(std::env::var("PERCOLATOR_REQUIRE_REDIS").is_err(), "PERCOLATOR_DEV_CLUSTER_DIR is needed");
        return;
    };
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = Path::new(&dir);
    let namespace = unique_namespace();
    let open = |degraded_writes: bool| {
        let config = RedisConfig {
            nodes: nodes.clone(),
            namespace: namespace.clone(),
            degraded_writes,
            ..RedisConfig::default()
        };
        RedisBigtable::open(config).unwrap()
    };
    let (strict, degraded) = (open(false), open(true));
    // One write in every bucket, so one lands on the master that lost its replica.
    let write_everywhere = |db: &RedisBigtable, value: &str| -> percolator_store::Result<()> {
        let ops = (0..64)
            .map(|i| {
                Op::Row(RowMutation {
                    table: "t".into(),
                    row: format!("r{i}").into_bytes(),
                    conditions: vec![],
                    mutations: vec![Mutation::PutData {
                        column: "c".into(),
                        start_ts: Timestamp::from_raw(1),
                        value: value.as_bytes().to_vec(),
                    }],
                })
            })
            .collect();
        db.apply(ops).map(|_| ())
    };
    write_everywhere(&strict, "before").unwrap();
    let name = first_master(dir);
    dev_cluster(dir, &["kill", &name]);
    dev_cluster(dir, &["wait-ok"]);
    let refused = write_everywhere(&strict, "strict");
    let taken = write_everywhere(&degraded, "degraded");
    dev_cluster(dir, &["start", &name]);
    dev_cluster(dir, &["wait-ok"]);
    match refused {
        Err(percolator_store::Error::Unavailable(m)) => assert!(m.contains("replicas"), "{m}"),
        other => panic!("expected the strict commit to fail for want of a replica, got {other:?}"),
    }
    taken.expect("degraded_writes: the master that lost its replica takes commits");
    // Its replica back, the strict backend commits again.
    write_everywhere(&strict, "after").unwrap();
}
