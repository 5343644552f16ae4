//! A list-append checker for snapshot isolation, after Jepsen's Elle (Kingsbury & Alvaro,
//! "Elle: Inferring Isolation Anomalies from Experimental Observations", VLDB 2020).
//!
//! Every key holds a list; a transaction appends unique values to keys and reads whole lists.
//! Because each value is appended once, a read names the transaction behind every element, and
//! because lists only grow, the longest read of a key is the key's version order (every other
//! read must be a prefix of it). From that order the checker derives the dependency graph of
//! Adya's thesis:
//! - **ww**: T1 appended the element right before T2's in a key's order;
//! - **wr**: T2 read a version whose last element T1 appended;
//! - **rw** (anti-dependency): T1 read a version and T2 appended the element that follows it.
//!
//! and reports what snapshot isolation forbids: G0 (a cycle of ww edges), G1a (reading an
//! aborted append), G1b (reading an intermediate append), G1c (a cycle of ww and wr edges),
//! G-single (a cycle with exactly one rw edge: read skew), lost update (two committed
//! transactions read the same version of a key and both appended to it), duplicate elements,
//! elements nobody appended, incompatible orders (two reads of a key that are not prefixes of
//! each other) and a transaction not seeing its own appends. G2-item (cycles with two or more rw
//! edges: write skew) is what SI allows; it is counted, not reported.
//!
//! A transaction whose commit outcome is unknown (`Error::Unavailable`) may or may not have
//! committed: it joins the graph only if a read saw one of its appends, and then counts as
//! committed. Cycles are found like Elle does: strongly connected components first (Tarjan),
//! then a breadth-first search inside a component restricted to the edge classes of the
//! anomaly, so a history of thousands of transactions checks in well under a second.
#![allow(dead_code, unreachable_pub, missing_docs)]

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet, VecDeque};
use std::fmt;

pub type Key = u64;
pub type Value = u64;

/// What became of a transaction's commit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Committed,
    /// Known not to have committed (a conflict, or it never reached commit).
    Aborted,
    /// The commit failed in a way that leaves the outcome open.
    Unknown,
}

/// One step of a transaction, in the order it ran.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MicroOp {
    Append(Key, Value),
    /// The whole list the transaction saw (its own earlier appends included).
    Read(Key, Vec<Value>),
}

/// A transaction of the history. `process` is the single-threaded client that ran it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Txn {
    pub process: u64,
    pub outcome: Outcome,
    pub ops: Vec<MicroOp>,
}

/// The anomalies snapshot isolation rules out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    G0,
    G1a,
    G1b,
    G1c,
    GSingle,
    LostUpdate,
    Duplicate,
    Garbage,
    IncompatibleOrder,
    Internal,
}

impl Kind {
    pub const ALL: [Kind; 10] = [
        Kind::G0,
        Kind::G1a,
        Kind::G1b,
        Kind::G1c,
        Kind::GSingle,
        Kind::LostUpdate,
        Kind::Duplicate,
        Kind::Garbage,
        Kind::IncompatibleOrder,
        Kind::Internal,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::G0 => "G0 (write cycle)",
            Kind::G1a => "G1a (aborted read)",
            Kind::G1b => "G1b (intermediate read)",
            Kind::G1c => "G1c (circular information flow)",
            Kind::GSingle => "G-single (read skew)",
            Kind::LostUpdate => "lost update",
            Kind::Duplicate => "duplicate element",
            Kind::Garbage => "element nobody appended",
            Kind::IncompatibleOrder => "incompatible order",
            Kind::Internal => "internal (own appends not seen)",
        }
    }
}

/// One anomaly found, with an explanation naming the transactions and keys.
#[derive(Clone, Debug)]
pub struct Anomaly {
    pub kind: Kind,
    pub explanation: String,
}

/// Explanations kept per kind; the counts cover every anomaly.
const EXAMPLES_PER_KIND: usize = 5;

/// What [`check`] found.
#[derive(Debug, Default)]
pub struct Report {
    pub transactions: usize,
    pub committed: usize,
    pub aborted: usize,
    pub unknown: usize,
    /// Unknown-outcome transactions a read proved committed.
    pub unknown_seen: usize,
    pub ww_edges: usize,
    pub wr_edges: usize,
    pub rw_edges: usize,
    counts: BTreeMap<Kind, usize>,
    examples: Vec<Anomaly>,
    /// Anti-dependencies that lie on a cycle, but only on cycles with two or more of them:
    /// G2-item, write skew, which snapshot isolation allows.
    pub write_skew: usize,
    pub write_skew_example: Option<String>,
    /// Committed appends that no read saw, as (transaction, key, value). Not an anomaly by
    /// itself; a history that ends with a read of every key after all writers finished must
    /// have none (a committed write was lost).
    pub unread_committed_appends: Vec<(usize, Key, Value)>,
}

impl Report {
    pub fn count(&self, kind: Kind) -> usize {
        self.counts.get(&kind).copied().unwrap_or(0)
    }

    /// True if nothing snapshot isolation forbids was found.
    pub fn is_valid(&self) -> bool {
        self.counts.values().all(|&n| n == 0)
    }

    /// The kinds found, with their counts.
    pub fn found(&self) -> Vec<(Kind, usize)> {
        self.counts.iter().filter(|(_, n)| **n > 0).map(|(k, n)| (*k, *n)).collect()
    }

    pub fn examples(&self) -> &[Anomaly] {
        &self.examples
    }

    fn add(&mut self, kind: Kind, explanation: impl FnOnce() -> String) {
        let n = self.counts.entry(kind).or_default();
        *n += 1;
        if *n <= EXAMPLES_PER_KIND {
            self.examples.push(Anomaly { kind, explanation: explanation() });
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} transactions ({} committed, {} aborted, {} unknown of which {} seen committed); \
             {} ww, {} wr, {} rw edges",
            self.transactions,
            self.committed,
            self.aborted,
            self.unknown,
            self.unknown_seen,
            self.ww_edges,
            self.wr_edges,
            self.rw_edges
        )?;
        let counts: Vec<String> = Kind::ALL.iter().map(|k| format!("{} {}", k.name(), self.count(*k))).collect();
        writeln!(f, "forbidden under SI: {}", counts.join(", "))?;
        writeln!(f, "allowed under SI: G2-item (write skew) {} anti-dependency edges", self.write_skew)?;
        for a in &self.examples {
            writeln!(f, "{}: {}", a.kind.name(), a.explanation)?;
        }
        if let Some(e) = &self.write_skew_example {
            writeln!(f, "write skew example (allowed): {e}")?;
        }
        Ok(())
    }
}

impl Txn {
    /// One line, `TXN <process> <outcome> <op>;<op>…` with ops `r<key>=<v>,<v>…` and
    /// `a<key>=<v>`: how a child process hands its history to the parent.
    pub fn to_line(&self) -> String {
        let outcome = match self.outcome {
            Outcome::Committed => "committed",
            Outcome::Aborted => "aborted",
            Outcome::Unknown => "unknown",
        };
        let ops: Vec<String> = self
            .ops
            .iter()
            .map(|op| match op {
                MicroOp::Append(k, v) => format!("a{k}={v}"),
                MicroOp::Read(k, vs) => {
                    format!("r{k}={}", vs.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(","))
                }
            })
            .collect();
        format!("TXN {} {outcome} {}", self.process, ops.join(";"))
    }

    /// The inverse of [`Txn::to_line`].
    pub fn parse_line(line: &str) -> Result<Txn, String> {
        let bad = |why: &str| format!("bad history line {line:?}: {why}");
        let mut parts = line.trim().splitn(4, ' ');
        if parts.next() != Some("TXN") {
            return Err(bad("expected TXN"));
        }
        let process = parts.next().and_then(|p| p.parse().ok()).ok_or_else(|| bad("process"))?;
        let outcome = match parts.next() {
            Some("committed") => Outcome::Committed,
            Some("aborted") => Outcome::Aborted,
            Some("unknown") => Outcome::Unknown,
            _ => return Err(bad("outcome")),
        };
        let num = |s: &str| s.parse::<u64>().map_err(|_| bad(&format!("number {s:?}")));
        let mut ops = Vec::new();
        for op in parts.next().unwrap_or("").split(';').filter(|s| !s.is_empty()) {
            let (head, rest) = op.split_once('=').ok_or_else(|| bad("op without ="))?;
            let key = num(&head[1..])?;
            match &head[..1] {
                "a" => ops.push(MicroOp::Append(key, num(rest)?)),
                "r" => ops.push(MicroOp::Read(
                    key,
                    rest.split(',').filter(|s| !s.is_empty()).map(num).collect::<Result<_, _>>()?,
                )),
                _ => return Err(bad("op is neither r nor a")),
            }
        }
        Ok(Txn { process, outcome, ops })
    }
}

/// A list in a message: short lists whole, long ones by their last elements.
fn show_list(vs: &[Value]) -> String {
    const TAIL: usize = 3;
    let items = |vs: &[Value]| vs.iter().map(|v| v.to_string()).collect::<Vec<_>>().join(", ");
    if vs.len() <= TAIL + 1 {
        format!("[{}]", items(vs))
    } else {
        format!("[…{} more…, {}]", vs.len() - TAIL, items(&vs[vs.len() - TAIL..]))
    }
}

/// `T7 (process 2, committed: r k1 [1, 2], a k1 3)`.
fn show_txn(history: &[Txn], i: usize) -> String {
    let t = &history[i];
    let ops: Vec<String> = t
        .ops
        .iter()
        .map(|op| match op {
            MicroOp::Append(k, v) => format!("a k{k} {v}"),
            MicroOp::Read(k, vs) => format!("r k{k} {}", show_list(vs)),
        })
        .collect();
    format!("T{i} (process {}, {:?}: {})", t.process, t.outcome, ops.join(", "))
}

fn show_version(last: Option<Value>) -> String {
    match last {
        Some(v) => format!("up to {v}"),
        None => "as empty".into(),
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Dep {
    Ww,
    Wr,
    Rw,
}

/// A dependency `from → to` on `key`.
#[derive(Clone, Copy, Debug)]
struct Edge {
    from: usize,
    to: usize,
    dep: Dep,
    key: Key,
    /// ww: from's element; wr: the element `to` read last (from's); rw: the last element `from`
    /// read (`None`: it read the key empty).
    from_value: Option<Value>,
    /// ww and rw: to's element, which follows.
    to_value: Option<Value>,
}

impl Edge {
    fn explain(&self) -> String {
        let (f, t, k) = (self.from, self.to, self.key);
        match self.dep {
            Dep::Ww => format!(
                "T{f} -ww k{k}-> T{t}: T{t} appended {} right after T{f}'s {} to k{k}",
                self.to_value.unwrap(),
                self.from_value.unwrap()
            ),
            Dep::Wr => {
                format!("T{f} -wr k{k}-> T{t}: T{t} read k{k} up to {}, which T{f} appended", self.from_value.unwrap())
            }
            Dep::Rw => format!(
                "T{f} -rw k{k}-> T{t}: T{f} read k{k} {} and missed {}, which T{t} appended next",
                show_version(self.from_value),
                self.to_value.unwrap()
            ),
        }
    }
}

/// Where an appended value came from.
#[derive(Clone, Copy)]
struct Writer {
    txn: usize,
    key: Key,
    /// Whether it is the transaction's last append to the key (else an intermediate one).
    last: bool,
}

struct Graph {
    edges: Vec<Edge>,
    out: Vec<Vec<usize>>,
    seen: HashSet<(usize, usize, Dep)>,
}

impl Graph {
    fn new(n: usize) -> Graph {
        Graph { edges: Vec::new(), out: vec![Vec::new(); n], seen: HashSet::new() }
    }

    /// Adds `e` unless it is a self loop or the same (from, to, class) is there already.
    fn add(&mut self, e: Edge) {
        if e.from != e.to && self.seen.insert((e.from, e.to, e.dep)) {
            self.out[e.from].push(self.edges.len());
            self.edges.push(e);
        }
    }

    /// Strongly connected components over the edges `allowed` keeps (Tarjan, iterative):
    /// each node's component number. Numbers are given as components complete, so an edge
    /// between two components always goes from the higher number to the lower.
    fn components(&self, allowed: impl Fn(Dep) -> bool) -> Vec<usize> {
        let n = self.out.len();
        const NONE: usize = usize::MAX;
        let (mut index, mut low, mut comp) = (vec![NONE; n], vec![0; n], vec![NONE; n]);
        let mut on_stack = vec![false; n];
        let (mut stack, mut call) = (Vec::new(), Vec::<(usize, usize)>::new());
        let (mut next_index, mut next_comp) = (0, 0);
        for root in 0..n {
            if index[root] != NONE {
                continue;
            }
            index[root] = next_index;
            low[root] = next_index;
            next_index += 1;
            stack.push(root);
            on_stack[root] = true;
            call.push((root, 0));
            while let Some(&(v, pos)) = call.last() {
                if pos < self.out[v].len() {
                    call.last_mut().unwrap().1 += 1;
                    let e = &self.edges[self.out[v][pos]];
                    if !allowed(e.dep) {
                        continue;
                    }
                    let w = e.to;
                    if index[w] == NONE {
                        index[w] = next_index;
                        low[w] = next_index;
                        next_index += 1;
                        stack.push(w);
                        on_stack[w] = true;
                        call.push((w, 0));
                    } else if on_stack[w] {
                        low[v] = low[v].min(index[w]);
                    }
                } else {
                    call.pop();
                    if let Some(&(u, _)) = call.last() {
                        low[u] = low[u].min(low[v]);
                    }
                    if low[v] == index[v] {
                        loop {
                            let w = stack.pop().unwrap();
                            on_stack[w] = false;
                            comp[w] = next_comp;
                            if w == v {
                                break;
                            }
                        }
                        next_comp += 1;
                    }
                }
            }
        }
        comp
    }

    /// The shortest path `from ⇝ to` over allowed edges through nodes `within` keeps, as
    /// edge indices.
    fn path(
        &self,
        from: usize,
        to: usize,
        allowed: impl Fn(Dep) -> bool,
        within: impl Fn(usize) -> bool,
    ) -> Option<Vec<usize>> {
        let mut parent: HashMap<usize, usize> = HashMap::new();
        let mut queue = VecDeque::from([from]);
        let mut visited = HashSet::from([from]);
        while let Some(v) = queue.pop_front() {
            if v == to {
                let mut path = Vec::new();
                let mut at = to;
                while at != from {
                    let e = parent[&at];
                    path.push(e);
                    at = self.edges[e].from;
                }
                path.reverse();
                return Some(path);
            }
            for &e in &self.out[v] {
                let edge = &self.edges[e];
                if allowed(edge.dep) && within(edge.to) && visited.insert(edge.to) {
                    parent.insert(edge.to, e);
                    queue.push_back(edge.to);
                }
            }
        }
        None
    }

    /// `cycle` (edge indices, each ending where the next starts) in words: the transactions, each
    /// edge explained, then each transaction's micro-ops.
    fn explain_cycle(&self, history: &[Txn], cycle: &[usize]) -> String {
        let nodes: Vec<String> = cycle.iter().map(|&e| format!("T{}", self.edges[e].from)).collect();
        let mut s = format!("{} -> T{}", nodes.join(" -> "), self.edges[cycle[0]].from);
        for &e in cycle {
            s.push_str("\n    ");
            s.push_str(&self.edges[e].explain());
        }
        for &e in cycle {
            s.push_str("\n    ");
            s.push_str(&show_txn(history, self.edges[e].from));
        }
        s
    }
}

fn ww_only(d: Dep) -> bool {
    d == Dep::Ww
}
fn ww_wr(d: Dep) -> bool {
    d != Dep::Rw
}
fn any_dep(_: Dep) -> bool {
    true
}

/// Checks a list-append history; see the module documentation.
///
/// # Panics
/// If the history is not well formed: a value appended twice (the workload must make every
/// appended value unique, or elements cannot be attributed).
pub fn check(history: &[Txn]) -> Report {
    let n = history.len();
    let mut report = Report { transactions: n, ..Report::default() };
    for t in history {
        match t.outcome {
            Outcome::Committed => report.committed += 1,
            Outcome::Aborted => report.aborted += 1,
            Outcome::Unknown => report.unknown += 1,
        }
    }

    // Who appended what.
    let mut writers: HashMap<Value, Writer> = HashMap::new();
    for (i, t) in history.iter().enumerate() {
        let mut last_of_key: HashMap<Key, Value> = HashMap::new();
        for op in &t.ops {
            if let MicroOp::Append(k, v) = *op {
                if let Some(w) = writers.insert(v, Writer { txn: i, key: k, last: false }) {
                    panic!("invalid history: value {v} appended by T{} and T{i}", w.txn);
                }
                last_of_key.insert(k, v);
            }
        }
        for v in last_of_key.values() {
            writers.get_mut(v).unwrap().last = true;
        }
    }

    // Which transactions take part: the committed ones, and unknown ones a participant read
    // from (to a fixed point: a participant's reads may prove another unknown one committed).
    let mut counted: Vec<bool> = history.iter().map(|t| t.outcome == Outcome::Committed).collect();
    let mut work: Vec<usize> = (0..n).filter(|&i| counted[i]).collect();
    while let Some(i) = work.pop() {
        for op in &history[i].ops {
            if let MicroOp::Read(_, vs) = op {
                for v in vs {
                    if let Some(w) = writers.get(v)
                        && history[w.txn].outcome == Outcome::Unknown
                        && !counted[w.txn]
                    {
                        counted[w.txn] = true;
                        report.unknown_seen += 1;
                        work.push(w.txn);
                    }
                }
            }
        }
    }

    // Reads, one transaction at a time: the version of a key each saw from outside (the list
    // without its own appends), and whether it saw its own appends.
    let mut external: BTreeMap<(usize, Key), &[Value]> = BTreeMap::new();
    let mut reads_of_key: BTreeMap<Key, Vec<(usize, &[Value])>> = BTreeMap::new();
    for (i, t) in history.iter().enumerate().filter(|(i, _)| counted[*i]) {
        let mut own: HashMap<Key, Vec<Value>> = HashMap::new();
        for op in &t.ops {
            match op {
                MicroOp::Append(k, v) => own.entry(*k).or_default().push(*v),
                MicroOp::Read(k, vs) => {
                    reads_of_key.entry(*k).or_default().push((i, vs));
                    let mine = own.get(k).map(Vec::as_slice).unwrap_or(&[]);
                    if !vs.ends_with(mine) {
                        report.add(Kind::Internal, || {
                            format!(
                                "T{i} read k{k} = {} after appending {} to it: {}",
                                show_list(vs),
                                show_list(mine),
                                show_txn(history, i)
                            )
                        });
                        continue;
                    }
                    let ext = &vs[..vs.len() - mine.len()];
                    match external.get(&(i, *k)) {
                        Some(prev) if *prev != ext => report.add(Kind::Internal, || {
                            format!(
                                "T{i} read k{k} as {} and later as {} (without its own appends): {}",
                                show_list(prev),
                                show_list(ext),
                                show_txn(history, i)
                            )
                        }),
                        Some(_) => {}
                        None => {
                            external.insert((i, *k), ext);
                        }
                    }
                }
            }
        }
    }

    // Version order: each key's longest read (the latest of equally long ones); every read
    // must be a prefix of it. The elements are checked where they are first seen: the longest
    // read whole, an incompatible one from where it departs (a prefix adds nothing new).
    let mut order: BTreeMap<Key, &[Value]> = BTreeMap::new();
    let mut position: HashMap<Value, usize> = HashMap::new();
    let mut read_anywhere: HashSet<Value> = HashSet::new();
    for (&k, reads) in &reads_of_key {
        let &(longest_txn, longest) = reads.iter().max_by_key(|(i, vs)| (vs.len(), *i)).unwrap();
        check_elements(&mut report, history, &writers, longest_txn, k, longest, 0);
        for &(i, vs) in reads {
            if !longest.starts_with(vs) {
                let at = vs.iter().zip(longest.iter()).take_while(|(a, b)| a == b).count();
                report.add(Kind::IncompatibleOrder, || {
                    format!(
                        "T{i} read k{k} = {} but T{longest_txn} read k{k} = {}: at position {at} one has {} and \
                         the other {}\n    {}\n    {}",
                        show_list(vs),
                        show_list(longest),
                        vs.get(at).map_or("nothing".into(), |v| v.to_string()),
                        longest.get(at).map_or("nothing".into(), |v| v.to_string()),
                        show_txn(history, i),
                        show_txn(history, longest_txn)
                    )
                });
                check_elements(&mut report, history, &writers, i, k, vs, at);
                read_anywhere.extend(vs[at..].iter().copied());
            }
        }
        for (p, v) in longest.iter().enumerate() {
            position.entry(*v).or_insert(p);
        }
        read_anywhere.extend(longest.iter().copied());
        order.insert(k, longest);
    }
    let node = |v: &Value| writers.get(v).map(|w| w.txn).filter(|&t| counted[t]);

    let mut g = Graph::new(n);
    // ww: consecutive elements of each key's order.
    for (&key, list) in &order {
        for pair in list.windows(2) {
            if let (Some(from), Some(to)) = (node(&pair[0]), node(&pair[1])) {
                g.add(Edge { from, to, dep: Dep::Ww, key, from_value: Some(pair[0]), to_value: Some(pair[1]) });
            }
        }
    }
    // wr, rw, G1b and lost update, from each transaction's external version of a key.
    let mut appenders_by_version: BTreeMap<(Key, Option<Value>), Vec<usize>> = BTreeMap::new();
    for (&(reader, key), ext) in &external {
        let last = ext.last().copied();
        if let Some(x) = last
            && let Some(w) = writers.get(&x)
        {
            if let Some(from) = node(&x) {
                g.add(Edge { from, to: reader, dep: Dep::Wr, key, from_value: Some(x), to_value: None });
            }
            if w.txn != reader && !w.last && w.key == key {
                report.add(Kind::G1b, || {
                    format!(
                        "T{reader} read k{key} up to {x}, an intermediate append of T{} (which appended to k{key} again)\n    {}\n    {}",
                        w.txn,
                        show_txn(history, reader),
                        show_txn(history, w.txn)
                    )
                });
            }
        }
        // The element after the version read: right after it if the read is a prefix of the
        // order, else after the last element's place in it. Elements the same transaction
        // appended after an intermediate one are skipped (that read is G1b, above): the next
        // version is the next transaction's.
        let list = order.get(&key).copied().unwrap_or(&[]);
        let mut next = if list.starts_with(ext) {
            ext.len()
        } else {
            last.and_then(|x| position.get(&x)).map_or(list.len(), |p| p + 1)
        };
        let last_writer = last.and_then(|x| writers.get(&x)).map(|w| w.txn);
        while next < list.len() && writers.get(&list[next]).map(|w| w.txn).is_some_and(|t| Some(t) == last_writer) {
            next += 1;
        }
        if let Some(v) = list.get(next)
            && let Some(to) = node(v)
        {
            g.add(Edge { from: reader, to, dep: Dep::Rw, key, from_value: last, to_value: Some(*v) });
        }
        let appends_key = history[reader].ops.iter().any(|op| matches!(op, MicroOp::Append(k, _) if *k == key));
        if appends_key {
            appenders_by_version.entry((key, last)).or_default().push(reader);
        }
    }
    for ((key, last), txns) in &appenders_by_version {
        if txns.len() > 1 {
            report.add(Kind::LostUpdate, || {
                let names: Vec<String> = txns.iter().map(|t| format!("T{t}")).collect();
                let (rest, final_name) = names.split_at(names.len() - 1);
                let list: Vec<String> = txns.iter().map(|&t| format!("\n    {}", show_txn(history, t))).collect();
                format!(
                    "{} and {} read k{key} {} and each appended to it{}",
                    rest.join(", "),
                    final_name[0],
                    show_version(*last),
                    list.concat()
                )
            });
        }
    }
    for e in &g.edges {
        match e.dep {
            Dep::Ww => report.ww_edges += 1,
            Dep::Wr => report.wr_edges += 1,
            Dep::Rw => report.rw_edges += 1,
        }
    }

    find_cycles(&g, history, &mut report);

    for (i, t) in history.iter().enumerate().filter(|(i, _)| counted[*i]) {
        for op in &t.ops {
            if let MicroOp::Append(k, v) = op
                && !read_anywhere.contains(v)
            {
                report.unread_committed_appends.push((i, *k, *v));
            }
        }
    }
    report
}

/// Duplicates, elements nobody appended (to this key) and aborted elements (G1a) in the
/// elements of `vs`, transaction `i`'s read of `k`, from position `from` on: each anomalous
/// element is reported once, by the first read that shows it.
fn check_elements(
    report: &mut Report,
    history: &[Txn],
    writers: &HashMap<Value, Writer>,
    i: usize,
    k: Key,
    vs: &[Value],
    from: usize,
) {
    let mut seen: HashSet<Value> = vs[..from].iter().copied().collect();
    for v in &vs[from..] {
        if !seen.insert(*v) {
            report.add(Kind::Duplicate, || format!("T{i} read k{k} with {v} twice: {}", show_txn(history, i)));
        }
        match writers.get(v) {
            None => report.add(Kind::Garbage, || {
                format!("T{i} read k{k} with {v}, which no transaction appended: {}", show_txn(history, i))
            }),
            Some(w) if w.key != k => report.add(Kind::Garbage, || {
                format!(
                    "T{i} read k{k} with {v}, which T{} appended to k{}, not k{k}: {}",
                    w.txn,
                    w.key,
                    show_txn(history, i)
                )
            }),
            Some(w) if history[w.txn].outcome == Outcome::Aborted => report.add(Kind::G1a, || {
                format!(
                    "T{i} read k{k} with {v}, appended by T{}, which aborted\n    {}\n    {}",
                    w.txn,
                    show_txn(history, i),
                    show_txn(history, w.txn)
                )
            }),
            Some(_) => {}
        }
    }
}

/// G0, G1c, G-single and (counted) G2-item cycles.
fn find_cycles(g: &Graph, history: &[Txn], report: &mut Report) {
    let members = |comp: &[usize]| {
        let mut m: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for (v, &c) in comp.iter().enumerate() {
            m.entry(c).or_default().push(v);
        }
        m.into_values().filter(|vs| vs.len() > 1).collect::<Vec<_>>()
    };
    // A cycle starting with an edge of class `first` inside a component of `comp`, closed by
    // edges `allowed` keeps.
    let cycle_in = |comp: &[usize], nodes: &[usize], first: Dep, allowed: fn(Dep) -> bool| {
        nodes.iter().flat_map(|&v| g.out[v].iter().copied()).find_map(|e| {
            let edge = &g.edges[e];
            if edge.dep != first || comp[edge.to] != comp[edge.from] {
                return None;
            }
            let c = comp[edge.from];
            g.path(edge.to, edge.from, allowed, |x| comp[x] == c).map(|p| [vec![e], p].concat())
        })
    };

    // G0: a cycle of ww edges; one per component of the ww graph.
    let ww = g.components(ww_only);
    for nodes in members(&ww) {
        let cycle = cycle_in(&ww, &nodes, Dep::Ww, ww_only).expect("a ww component has a ww cycle");
        report.add(Kind::G0, || g.explain_cycle(history, &cycle));
    }
    // G1c: a cycle of ww and wr edges with at least one wr (all-ww ones are G0 above).
    let wwr = g.components(ww_wr);
    for nodes in members(&wwr) {
        if let Some(cycle) = cycle_in(&wwr, &nodes, Dep::Wr, ww_wr) {
            report.add(Kind::G1c, || g.explain_cycle(history, &cycle));
        }
    }

    // G-single: an rw edge a → b closed by a ww/wr path b ⇝ a. Such a path must stay inside
    // a's component of the whole graph, and can only go through ww/wr components that come no
    // later than a's in a topological order of the ww/wr condensation. The order is built with
    // the history's order as tie-break (Kahn with a min-heap), so it roughly follows time and
    // the forward-in-time anti-dependencies SI produces need no search at all.
    let all = g.components(any_dep);
    let ncomp = wwr.iter().max().map_or(0, |m| m + 1);
    let mut indegree = vec![0usize; ncomp];
    let mut first_node = vec![usize::MAX; ncomp];
    let mut succ: Vec<Vec<usize>> = vec![Vec::new(); ncomp];
    for (v, &c) in wwr.iter().enumerate() {
        first_node[c] = first_node[c].min(v);
    }
    for e in g.edges.iter().filter(|e| ww_wr(e.dep) && wwr[e.from] != wwr[e.to]) {
        succ[wwr[e.from]].push(wwr[e.to]);
        indegree[wwr[e.to]] += 1;
    }
    let mut heap: BinaryHeap<Reverse<(usize, usize)>> =
        (0..ncomp).filter(|&c| indegree[c] == 0).map(|c| Reverse((first_node[c], c))).collect();
    let mut topo = vec![0usize; ncomp];
    let mut next = 0;
    while let Some(Reverse((_, c))) = heap.pop() {
        topo[c] = next;
        next += 1;
        for &s in &succ[c] {
            indegree[s] -= 1;
            if indegree[s] == 0 {
                heap.push(Reverse((first_node[s], s)));
            }
        }
    }
    for (e, edge) in g.edges.iter().enumerate().filter(|(_, e)| e.dep == Dep::Rw) {
        let (a, b) = (edge.from, edge.to);
        if all[a] != all[b] {
            continue; // on no cycle at all
        }
        let closing = if topo[wwr[b]] > topo[wwr[a]] {
            None
        } else {
            let limit = topo[wwr[a]];
            g.path(b, a, ww_wr, |x| all[x] == all[a] && topo[wwr[x]] <= limit)
        };
        match closing {
            Some(path) => report.add(Kind::GSingle, || g.explain_cycle(history, &[vec![e], path].concat())),
            None => {
                report.write_skew += 1;
                if report.write_skew_example.is_none()
                    && let Some(path) = g.path(b, a, any_dep, |x| all[x] == all[a])
                {
                    report.write_skew_example = Some(g.explain_cycle(history, &[vec![e], path].concat()));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! Hand-built histories, one per anomaly: the checker can fail.
    use super::*;

    fn txn(process: u64, outcome: Outcome, ops: &[MicroOp]) -> Txn {
        Txn { process, outcome, ops: ops.to_vec() }
    }
    fn ok(ops: &[MicroOp]) -> Txn {
        txn(0, Outcome::Committed, ops)
    }
    fn a(k: Key, v: Value) -> MicroOp {
        MicroOp::Append(k, v)
    }
    fn r(k: Key, vs: &[Value]) -> MicroOp {
        MicroOp::Read(k, vs.to_vec())
    }

    /// Exactly `kinds` are found (each at least once), and the report names the transactions.
    #[track_caller]
    fn assert_found(history: &[Txn], kinds: &[Kind], names: &[&str]) -> Report {
        let report = check(history);
        let found: Vec<Kind> = report.found().into_iter().map(|(k, _)| k).collect();
        assert_eq!(found, kinds, "{report}");
        let text = report.to_string();
        for name in names {
            assert!(text.contains(name), "the report does not name {name}:\n{text}");
        }
        report
    }

    #[test]
    fn serial_history_is_valid() {
        let h = [ok(&[r(1, &[]), a(1, 1)]), ok(&[r(1, &[1]), a(1, 2), r(2, &[])]), ok(&[r(1, &[1, 2]), r(2, &[])])];
        let report = assert_found(&h, &[], &[]);
        assert_eq!((report.ww_edges, report.wr_edges, report.write_skew), (1, 2, 0), "{report}");
        assert!(report.unread_committed_appends.is_empty());
    }

    #[test]
    fn g0_write_cycle() {
        // T0 before T1 on key 1, T1 before T0 on key 2.
        let h = [ok(&[a(1, 1), a(2, 3)]), ok(&[a(1, 2), a(2, 4)]), ok(&[r(1, &[1, 2]), r(2, &[4, 3])])];
        assert_found(&h, &[Kind::G0], &["T0 -ww k1-> T1", "T1 -ww k2-> T0"]);
    }

    #[test]
    fn g1a_aborted_read() {
        let h = [txn(0, Outcome::Aborted, &[a(1, 1)]), ok(&[r(1, &[1])])];
        assert_found(&h, &[Kind::G1a], &["T1 read k1 with 1, appended by T0, which aborted"]);
    }

    #[test]
    fn g1b_intermediate_read() {
        let h = [ok(&[a(1, 1), a(1, 2)]), ok(&[r(1, &[1])]), ok(&[r(1, &[1, 2])])];
        assert_found(&h, &[Kind::G1b], &["T1 read k1 up to 1, an intermediate append of T0"]);
    }

    #[test]
    fn g1c_circular_information_flow() {
        // Each reads the other's append.
        let h = [ok(&[a(1, 1), r(2, &[2])]), ok(&[a(2, 2), r(1, &[1])])];
        assert_found(&h, &[Kind::G1c], &["T0 -wr k1-> T1", "T1 -wr k2-> T0"]);
    }

    #[test]
    fn g_single_read_skew() {
        // T1 sees T0's append to key 2 but not its append to key 1.
        let h = [ok(&[a(1, 1), a(2, 2)]), ok(&[r(1, &[]), r(2, &[2])]), ok(&[r(1, &[1])])];
        assert_found(&h, &[Kind::GSingle], &["T1 -rw k1-> T0: T1 read k1 as empty and missed 1", "T0 -wr k2-> T1"]);
    }

    #[test]
    fn lost_update() {
        // Both read key 1 empty and appended; a later read shows both (as a store without
        // first-committer-wins on appends would).
        let h = [ok(&[r(1, &[]), a(1, 1)]), ok(&[r(1, &[]), a(1, 2)]), ok(&[r(1, &[1, 2])])];
        let report = assert_found(
            &h,
            &[Kind::GSingle, Kind::LostUpdate],
            &["T0 and T1 read k1 as empty and each appended to it"],
        );
        assert_eq!(report.count(Kind::LostUpdate), 1);
    }

    #[test]
    fn lost_update_by_overwrite_is_an_incompatible_order() {
        // The read-modify-write encoding of a list: the second write replaces the first.
        let h = [ok(&[r(1, &[]), a(1, 1)]), ok(&[r(1, &[1])]), ok(&[r(1, &[]), a(1, 2)]), ok(&[r(1, &[2])])];
        assert_found(
            &h,
            &[Kind::LostUpdate, Kind::IncompatibleOrder],
            &[
                "T0 and T2 read k1 as empty",
                "T1 read k1 = [1] but T3 read k1 = [2]: at position 0 one has 1 and the other 2",
            ],
        );
    }

    #[test]
    fn duplicate_element() {
        let h = [ok(&[a(1, 1)]), ok(&[r(1, &[1, 1])])];
        assert_found(&h, &[Kind::Duplicate], &["T1 read k1 with 1 twice"]);
    }

    #[test]
    fn element_nobody_appended() {
        let h = [ok(&[a(1, 1)]), ok(&[r(1, &[1, 99])]), ok(&[a(2, 5)]), ok(&[r(1, &[1, 99, 5])])];
        // Counted once per element, where first seen (the longest read).
        let report = assert_found(
            &h,
            &[Kind::Garbage],
            &["T3 read k1 with 99, which no transaction appended", "T2 appended to k2, not k1"],
        );
        assert_eq!(report.count(Kind::Garbage), 2, "{report}");
    }

    #[test]
    fn incompatible_order() {
        let h = [ok(&[a(1, 1)]), ok(&[a(1, 2)]), ok(&[r(1, &[1, 2])]), ok(&[r(1, &[2, 1])])];
        assert_found(&h, &[Kind::IncompatibleOrder], &["T2 read k1 = [1, 2] but T3 read k1 = [2, 1]"]);
    }

    #[test]
    fn internal_inconsistency() {
        let h = [ok(&[a(1, 1), r(1, &[])]), ok(&[r(2, &[]), r(2, &[3])]), ok(&[a(2, 3)])];
        let report = assert_found(&h, &[Kind::Internal], &["T0 read k1 = [] after appending [1]", "T1 read k2 as []"]);
        assert_eq!(report.count(Kind::Internal), 2);
    }

    #[test]
    fn write_skew_is_allowed_and_counted() {
        // Both read both keys empty and append to different ones: the SI write skew.
        let h =
            [ok(&[r(1, &[]), r(2, &[]), a(1, 1)]), ok(&[r(1, &[]), r(2, &[]), a(2, 2)]), ok(&[r(1, &[1]), r(2, &[2])])];
        let report = assert_found(&h, &[], &[]);
        assert_eq!(report.write_skew, 2, "{report}");
        assert!(report.write_skew_example.is_some());
    }

    #[test]
    fn unknown_outcomes() {
        // T0's append was seen: it committed, no G1a. T1's was not: it is left out, and its
        // read (which would be read skew if it had committed) does not count.
        let h = [
            txn(1, Outcome::Unknown, &[r(1, &[]), a(1, 1)]),
            txn(2, Outcome::Unknown, &[r(1, &[]), r(2, &[2]), a(3, 3)]),
            txn(3, Outcome::Committed, &[a(2, 2)]),
            ok(&[r(1, &[1]), r(2, &[2])]),
        ];
        let report = assert_found(&h, &[], &[]);
        assert_eq!((report.unknown, report.unknown_seen), (2, 1));
        assert_eq!(report.unread_committed_appends, Vec::new());
        // Seen committed, an unknown transaction's reads are checked like any other.
        let h = [
            txn(1, Outcome::Committed, &[a(1, 1), a(2, 2)]),
            txn(2, Outcome::Unknown, &[r(1, &[]), r(2, &[2]), a(3, 3)]),
            ok(&[r(1, &[1]), r(3, &[3])]),
        ];
        assert_found(&h, &[Kind::GSingle], &["T1 -rw k1-> T0"]);
    }

    #[test]
    fn lines_round_trip() {
        for t in [
            txn(7, Outcome::Committed, &[r(1, &[]), a(1, 5), r(2, &[3, 4])]),
            txn(0, Outcome::Aborted, &[a(3, 9)]),
            txn(12, Outcome::Unknown, &[r(0, &[1])]),
        ] {
            assert_eq!(Txn::parse_line(&t.to_line()), Ok(t.clone()), "{}", t.to_line());
        }
        assert!(Txn::parse_line("TXN 1 maybe a1=2").is_err());
        assert!(Txn::parse_line("TXN 1 committed x1=2").is_err());
    }

    /// A long history simulated under SI (snapshots a few commits old, first committer wins,
    /// so write skew happens) checks quickly and cleanly; a read skew planted at its end is found.
    #[test]
    fn large_history() {
        const KEYS: usize = 8;
        let mut h = Vec::new();
        let mut lists: Vec<Vec<Value>> = vec![Vec::new(); KEYS];
        // Each list's length after each transaction: a snapshot is a row of lengths.
        let mut lengths: Vec<[usize; KEYS]> = vec![[0; KEYS]];
        // The index of the transaction that last appended to each key.
        let mut last_append: [Option<usize>; KEYS] = [None; KEYS];
        let mut seed = 1u64;
        let mut random = |below: usize| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) as usize % below
        };
        for i in 0..5000usize {
            let (k1, k2) = (random(KEYS), random(KEYS));
            let start = i.saturating_sub(random(6));
            let snapshot = lengths[start];
            let mut ops = vec![r(k1 as Key, &lists[k1][..snapshot[k1]]), r(k2 as Key, &lists[k2][..snapshot[k2]])];
            let mut outcome = Outcome::Committed;
            if i % 2 == 0 {
                ops.push(a(k1 as Key, i as Value));
                if last_append[k1].is_some_and(|j| j >= start) {
                    outcome = Outcome::Aborted;
                } else {
                    lists[k1].push(i as Value);
                    last_append[k1] = Some(i);
                }
            }
            h.push(txn(0, outcome, &ops));
            lengths.push(std::array::from_fn(|k| lists[k].len()));
        }
        h.push(ok(&(0..KEYS).map(|k| r(k as Key, &lists[k])).collect::<Vec<_>>()));
        let started = std::time::Instant::now();
        let report = check(&h);
        eprintln!("{} transactions checked in {:?}:\n{report}", h.len(), started.elapsed());
        assert!(report.is_valid(), "{report}");
        assert!(report.aborted > 100 && report.write_skew > 0 && report.rw_edges > 1000, "{report}");
        assert!(report.unread_committed_appends.is_empty(), "{report}");

        let w = h.len();
        h.push(ok(&[a(0, 100_000), a(1, 100_001)]));
        h.push(ok(&[r(0, &[lists[0].as_slice(), &[100_000]].concat()), r(1, &lists[1])]));
        h.push(ok(&[r(1, &[lists[1].as_slice(), &[100_001]].concat())]));
        let report = check(&h);
        assert_eq!(report.found(), vec![(Kind::GSingle, 1)], "{report}");
        assert!(report.to_string().contains(&format!("T{} -rw k1-> T{w}", w + 1)), "{report}");
    }
}
