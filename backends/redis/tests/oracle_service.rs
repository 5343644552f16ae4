//! The oracle service against a real 3-member etcd (`PERCOLATOR_ETCD`, see
//! `scripts/dev-cluster`): clients on several "hosts" get strictly increasing timestamps, none
//! issued twice, in real-time order (a timestamp received before another was requested is
//! smaller), while the leader process is SIGKILLed and replaced, and across a clean handover.

use percolator_testkit as common;

use std::process::Child;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use percolator_redis::{EtcdCoordination, OracleServer, OracleServiceConfig};
use percolator_store::{Error, Oracle};

const ENV: &str = "PERCOLATOR_ORACLE_CHILD";

fn config(etcd: Vec<String>, namespace: &str) -> OracleServiceConfig {
    OracleServiceConfig { etcd, namespace: namespace.into(), range: 1000, ..OracleServiceConfig::default() }
}

/// The child: one oracle candidate, printing its address, until killed.
#[test]
#[ignore = "run by the tests below as a child process"]
fn oracle_child() {
    let Ok(namespace) = std::env::var(ENV) else { return };
    let server = OracleServer::start(config(common::etcd_endpoints().unwrap(), &namespace)).unwrap();
    println!("ADDRESS {}", server.address());
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

struct Candidate {
    child: Child,
    address: String,
}

impl Candidate {
    fn start(namespace: &str) -> Candidate {
        let (child, lines) = common::spawn_child_test("oracle_child", ENV, namespace);
        let address = loop {
            let line = lines.recv_timeout(Duration::from_secs(60)).expect("the oracle child did not start");
            // The harness's "test oracle_child ... " may precede it on the line.
            if let Some((_, a)) = line.split_once("ADDRESS ") {
                break a.trim().to_string();
            }
        };
        Candidate { child, address }
    }
}

impl Drop for Candidate {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn wait_for_leader(etcd: &[String], namespace: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(a) = OracleServer::current_leader(etcd, namespace).unwrap() {
            return a;
        }
        assert!(Instant::now() < deadline, "no oracle leader was elected");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// (requested at, received at, timestamp) of every call of one calling thread, in order.
type Calls = Vec<(Instant, Instant, u64)>;

/// Checks uniqueness, per-thread order and real-time order over all threads' calls.
fn check(per_thread: &[Calls]) -> usize {
    for calls in per_thread {
        assert!(calls.windows(2).all(|w| w[0].2 < w[1].2), "a caller's timestamps went backwards");
    }
    let mut all: Calls = per_thread.iter().flatten().copied().collect();
    let mut ts: Vec<u64> = all.iter().map(|c| c.2).collect();
    ts.sort_unstable();
    let n = ts.len();
    ts.dedup();
    assert_eq!(ts.len(), n, "a timestamp was issued twice");
    // Real time: every call must return more than every call that finished before it started.
    all.sort_by_key(|c| c.0);
    let mut by_end: Calls = all.clone();
    by_end.sort_by_key(|c| c.1);
    let (mut j, mut max_done) = (0, 0u64);
    for (start, _, t) in &all {
        while j < by_end.len() && by_end[j].1 < *start {
            max_done = max_done.max(by_end[j].2);
            j += 1;
        }
        assert!(*t > max_done, "timestamp {t} was handed out after {max_done} had been received");
    }
    n
}

#[test]
fn timestamps_increase_across_a_killed_leader() {
    let Some(etcd) = common::etcd_endpoints() else { return };
    let namespace = common::unique_namespace();
    let first = Candidate::start(&namespace);
    let second = Candidate::start(&namespace);
    let leader = wait_for_leader(&etcd, &namespace);
    let (mut leader, standby) = if leader == first.address { (first, second) } else { (second, first) };
    let stop = AtomicBool::new(false);
    /// Stops the clients however the scope ends (a failed assertion must not leave them running).
    struct StopOnDrop<'a>(&'a AtomicBool);
    impl Drop for StopOnDrop<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let per_thread: Vec<Calls> = std::thread::scope(|s| {
        let clients: Vec<_> = (0..3)
            .map(|_| {
                let (etcd, namespace, stop) = (etcd.clone(), namespace.clone(), &stop);
                s.spawn(move || {
                    // Each client is a host's oracle client, with callers on 4 threads.
                    let oracle = EtcdCoordination::connect(&etcd, &namespace).map(Oracle::new).unwrap();
                    let calls = std::sync::Mutex::new(Vec::<Calls>::new());
                    std::thread::scope(|s2| {
                        for _ in 0..4 {
                            s2.spawn(|| {
                                let mut mine = Calls::new();
                                while !stop.load(Ordering::SeqCst) {
                                    let start = Instant::now();
                                    let t = oracle.next().unwrap();
                                    mine.push((start, Instant::now(), t.raw()));
                                }
                                calls.lock().unwrap().push(mine);
                            });
                        }
                    });
                    calls.into_inner().unwrap()
                })
            })
            .collect();
        let _stop = StopOnDrop(&stop);
        std::thread::sleep(Duration::from_millis(500));
        // SIGKILL the leader: the standby takes over once its lease expires.
        let _ = leader.child.kill();
        let _ = leader.child.wait();
        let deadline = Instant::now() + Duration::from_secs(20);
        while wait_for_leader(&etcd, &namespace) != standby.address {
            assert!(Instant::now() < deadline, "the standby did not take over");
            std::thread::sleep(Duration::from_millis(100));
        }
        // A new candidate joins; the run goes on under the new leader.
        leader = Candidate::start(&namespace);
        std::thread::sleep(Duration::from_millis(500));
        stop.store(true, Ordering::SeqCst);
        clients.into_iter().flat_map(|c| c.join().unwrap()).collect()
    });
    drop(leader);
    drop(standby);
    let n = check(&per_thread);
    assert!(n > 100, "only {n} timestamps were handed out");
}

#[test]
fn a_stopped_leader_hands_over_at_once() {
    let Some(etcd) = common::etcd_endpoints() else { return };
    let namespace = common::unique_namespace();
    let a = OracleServer::start(config(etcd.clone(), &namespace)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !a.is_leader() {
        assert!(Instant::now() < deadline, "no leader");
        std::thread::sleep(Duration::from_millis(20));
    }
    let b = OracleServer::start(config(etcd.clone(), &namespace)).unwrap();
    let oracle = EtcdCoordination::connect(&etcd, &namespace).map(Oracle::new).unwrap();
    assert!(oracle.is_shared());
    let before = oracle.next().unwrap();
    // Past one reserved range, so the high-water mark moved.
    let mut last = before;
    for _ in 0..2500 {
        let t = oracle.next().unwrap();
        assert!(t > last);
        last = t;
    }
    let handover = Instant::now();
    drop(a);
    let t = oracle.next().unwrap();
    assert!(t > last, "{t:?} after {last:?}");
    assert!(b.is_leader());
    assert!(handover.elapsed() < Duration::from_secs(2), "a clean stop revokes the lease: {:?}", handover.elapsed());
}

#[test]
fn without_etcd_or_leader_the_errors_say_so() {
    let e = EtcdCoordination::connect(&["localhost:2379".into()], "x").map(Oracle::new).err().unwrap();
    assert!(matches!(&e, Error::InvalidArgument(m) if m.contains("not an http:// URL")), "{e}");
    let Some(etcd) = common::etcd_endpoints() else { return };
    let oracle = EtcdCoordination::connect(&etcd, &common::unique_namespace()).map(Oracle::new).unwrap();
    let started = Instant::now();
    let e = oracle.next().unwrap_err();
    assert!(matches!(&e, Error::Unavailable(m) if m.contains("no oracle leader is elected")), "{e}");
    assert!(started.elapsed() >= Duration::from_secs(10), "retried for a while first");
}
