//! `bank-transfer`: the paper's Figure 4 — a bank transfer as one snapshot-isolation
//! transaction, run by an observer on each transfer request.
//!
//! Tables (values are decimal text, so both can be loaded from CSV or JSONL):
//! - `bank`: row = account name, `bal:amount` = balance, a whole number of the smallest unit
//!   (cents); an account exists iff it has a balance.
//! - `transfers`: row = request id, `req:from`, `req:to`, `req:amount` (a positive whole
//!   number), written by the user; `req:status` written by this observer.
//!
//! Bound strongly to `transfers/req:amount`. A run reads the request; if `req:status` is set the
//! request was already decided and nothing happens (a request is executed at most once, however
//! often `req:amount` is rewritten). Otherwise it reads both balances in the run's transaction
//! and records exactly one outcome in `req:status`, in the same transaction as any balance
//! change:
//! - `done`: the source had enough; debited and credited.
//! - `insufficient funds`: no balance changed.
//! - `rejected: <reason>`: a missing, unparsable or unknown field, or `from == to`; the reason
//!   names the field and its value. No balance changed.
//!
//! Two transfers touching one account both write its balance, so they conflict and the host
//! retries the loser on a fresh snapshot: money is conserved and no balance goes negative.
//!
//! ```toml
//! [[binding]]
//! name = "bank"
//! wasm = "bank_transfer.wasm"
//! table = "transfers"
//! column = "req:amount"
//! notify = "strong"
//! reads = ["bank/bal:*", "transfers/req:*"]
//! writes = ["bank/bal:amount", "transfers/req:status"]
//! ```
//!
//! Build with `scripts/build-guests` (→ `target/guests/bank_transfer.wasm`); unit tests run
//! natively: `cargo test -p bank-transfer` in `guest-examples/`.

use std::fmt;

use percolator_guest::{Cell, Error, Notification, Observer, Result, Txn};

/// The accounts table.
pub const BANK: &str = "bank";
/// An account's balance (decimal text).
pub const BALANCE: &str = "bal:amount";
/// The source account of a request.
pub const FROM: &str = "req:from";
/// The destination account of a request.
pub const TO: &str = "req:to";
/// The amount of a request (decimal text); the observed column.
pub const AMOUNT: &str = "req:amount";
/// The outcome of a request, written by the observer.
pub const STATUS: &str = "req:status";

/// Longest row key the store accepts: a longer account name cannot name an account.
const MAX_ROW_LEN: usize = 4096;

/// The observer.
pub struct BankTransfer;

impl Observer for BankTransfer {
    fn observe(txn: &mut impl Txn, n: &Notification) -> Result<()> {
        let fields = [STATUS, FROM, TO, AMOUNT].map(|column| n.cell.sibling(column));
        let [status, from, to, amount]: [Option<Vec<u8>>; 4] = txn
            .get_many(&fields)?
            .try_into()
            .map_err(|v: Vec<_>| Error::failed(format!("get_many of 4 cells returned {}", v.len())))?;
        if status.is_some() {
            return Ok(());
        }
        let outcome = match parse_request(from, to, amount) {
            Ok(request) => execute(txn, request)?,
            Err(reason) => Outcome::Rejected(reason),
        };
        txn.set_str(n.table(), n.row(), STATUS, &outcome.to_string())
    }
}

percolator_guest::export_observer!(BankTransfer);

/// What happened to a request: the text of `req:status`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Debited and credited.
    Done,
    /// The source balance is below the amount; nothing changed.
    InsufficientFunds,
    /// The request is malformed; the reason names the field and its value. Nothing changed.
    Rejected(String),
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Done => f.write_str("done"),
            Outcome::InsufficientFunds => f.write_str("insufficient funds"),
            Outcome::Rejected(reason) => write!(f, "rejected: {reason}"),
        }
    }
}

/// A well-formed request (its accounts may still not exist).
struct Request {
    from: String,
    to: String,
    amount: u64,
}

/// Checks the request's fields; `Err` is the rejection reason.
fn parse_request(from: Option<Vec<u8>>, to: Option<Vec<u8>>, amount: Option<Vec<u8>>) -> Result<Request, String> {
    let (from, to) = (account(FROM, from)?, account(TO, to)?);
    let amount = text(AMOUNT, amount)?;
    let amount = match amount.trim().parse::<u64>() {
        Ok(a) if a > 0 => a,
        _ => return Err(format!("{AMOUNT} {amount:?} is not a positive whole number")),
    };
    if from == to {
        return Err(format!("{FROM} and {TO} name the same account {from:?}"));
    }
    Ok(Request { from, to, amount })
}

/// Reads both balances and, if the source has enough, buffers the debit and the credit. Store
/// errors (a conflict above all) propagate; an unknown account is an outcome.
fn execute(txn: &mut impl Txn, Request { from, to, amount }: Request) -> Result<Outcome> {
    let balances =
        txn.get_many(&[Cell::new(BANK, from.as_bytes(), BALANCE), Cell::new(BANK, to.as_bytes(), BALANCE)])?;
    let balance = |field: &str, name: &str, value: &Option<Vec<u8>>| -> Result<u64, String> {
        let value = value
            .as_deref()
            .ok_or_else(|| format!("{field} {name:?} is not an account (no {BANK}/{name}/{BALANCE})"))?;
        std::str::from_utf8(value).ok().and_then(|v| v.trim().parse::<u64>().ok()).ok_or_else(|| {
            format!("{BANK}/{name}/{BALANCE} {:?} is not a whole number", String::from_utf8_lossy(value))
        })
    };
    let (source, dest) = match (balance(FROM, &from, &balances[0]), balance(TO, &to, &balances[1])) {
        (Ok(s), Ok(d)) => (s, d),
        (Err(reason), _) | (_, Err(reason)) => return Ok(Outcome::Rejected(reason)),
    };
    if source < amount {
        return Ok(Outcome::InsufficientFunds);
    }
    let Some(credited) = dest.checked_add(amount) else {
        return Ok(Outcome::Rejected(format!("crediting {amount} to {TO} {to:?} would overflow its balance")));
    };
    txn.set_str(BANK, from.as_bytes(), BALANCE, &(source - amount).to_string())?;
    txn.set_str(BANK, to.as_bytes(), BALANCE, &credited.to_string())?;
    Ok(Outcome::Done)
}

/// A request field as text, or the rejection reason.
fn text(field: &str, value: Option<Vec<u8>>) -> Result<String, String> {
    let value = value.ok_or_else(|| format!("{field} is missing"))?;
    String::from_utf8(value).map_err(|e| format!("{field} {:?} is not UTF-8", String::from_utf8_lossy(e.as_bytes())))
}

/// A request field naming an account, or the rejection reason.
fn account(field: &str, value: Option<Vec<u8>>) -> Result<String, String> {
    let name = text(field, value)?;
    if name.is_empty() {
        return Err(format!("{field} is empty"));
    }
    if name.len() > MAX_ROW_LEN {
        return Err(format!("{field} is {} bytes, longer than an account name can be ({MAX_ROW_LEN})", name.len()));
    }
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use percolator_guest::mem::MemStore;

    const TRANSFERS: &str = "transfers";

    /// A store with the binding's declared writes and accounts `(name, balance)`.
    fn bank(accounts: &[(&str, u64)]) -> MemStore {
        let store = MemStore::new();
        store.declare_writes(BANK, &[BALANCE]);
        store.declare_writes(TRANSFERS, &[STATUS]);
        for (name, balance) in accounts {
            store.put(BANK, name, BALANCE, balance.to_string());
        }
        store
    }

    /// Writes request `id` as the user would and returns its notification.
    fn request(store: &MemStore, id: &str, from: &str, to: &str, amount: &str) -> Notification {
        store.put(TRANSFERS, id, FROM, from);
        store.put(TRANSFERS, id, TO, to);
        store.put(TRANSFERS, id, AMOUNT, amount);
        store.notification(TRANSFERS, id, AMOUNT)
    }

    fn balance(store: &MemStore, name: &str) -> Option<u64> {
        store.get_str(BANK, name, BALANCE).map(|b| b.parse().unwrap())
    }

    fn status(store: &MemStore, id: &str) -> Option<String> {
        store.get_str(TRANSFERS, id, STATUS)
    }

    #[test]
    fn transfer_moves_money_and_says_done() {
        let store = bank(&[("alice", 100), ("bob", 5)]);
        store.observe::<BankTransfer>(&request(&store, "t1", "alice", "bob", "30")).unwrap();
        assert_eq!(status(&store, "t1").as_deref(), Some("done"));
        assert_eq!((balance(&store, "alice"), balance(&store, "bob")), (Some(70), Some(35)));
        // Exactly the whole balance is enough.
        store.observe::<BankTransfer>(&request(&store, "t2", "alice", "bob", "70")).unwrap();
        assert_eq!(status(&store, "t2").as_deref(), Some("done"));
        assert_eq!((balance(&store, "alice"), balance(&store, "bob")), (Some(0), Some(105)));
    }

    #[test]
    fn insufficient_funds_changes_no_balance() {
        let store = bank(&[("alice", 10), ("bob", 0)]);
        store.observe::<BankTransfer>(&request(&store, "t1", "alice", "bob", "11")).unwrap();
        assert_eq!(status(&store, "t1").as_deref(), Some("insufficient funds"));
        assert_eq!((balance(&store, "alice"), balance(&store, "bob")), (Some(10), Some(0)));
    }

    #[test]
    fn malformed_requests_are_rejected_with_the_field_and_value() {
        let store = bank(&[("alice", 10), ("bob", 0)]);
        store.put(BANK, "broken", BALANCE, "lots");
        let cases = [
            ("zed", "bob", "1", "rejected: req:from \"zed\" is not an account (no bank/zed/bal:amount)"),
            ("alice", "zed", "1", "rejected: req:to \"zed\" is not an account (no bank/zed/bal:amount)"),
            ("alice", "bob", "1.5", "rejected: req:amount \"1.5\" is not a positive whole number"),
            ("alice", "bob", "-3", "rejected: req:amount \"-3\" is not a positive whole number"),
            ("alice", "bob", "0", "rejected: req:amount \"0\" is not a positive whole number"),
            ("alice", "alice", "1", "rejected: req:from and req:to name the same account \"alice\""),
            ("alice", "", "1", "rejected: req:to is empty"),
            ("broken", "bob", "1", "rejected: bank/broken/bal:amount \"lots\" is not a whole number"),
        ];
        for (i, (from, to, amount, want)) in cases.into_iter().enumerate() {
            let id = format!("r{i}");
            store.observe::<BankTransfer>(&request(&store, &id, from, to, amount)).unwrap();
            assert_eq!(status(&store, &id).as_deref(), Some(want), "{from} -> {to}: {amount}");
        }
        let long = "x".repeat(5000);
        store.observe::<BankTransfer>(&request(&store, "long", &long, "bob", "1")).unwrap();
        let want = "rejected: req:from is 5000 bytes, longer than an account name can be (4096)";
        assert_eq!(status(&store, "long").as_deref(), Some(want));
        // A request without `req:from`.
        store.put(TRANSFERS, "partial", AMOUNT, "1");
        store.observe::<BankTransfer>(&store.notification(TRANSFERS, "partial", AMOUNT)).unwrap();
        assert_eq!(status(&store, "partial").as_deref(), Some("rejected: req:from is missing"));
        assert_eq!((balance(&store, "alice"), balance(&store, "bob")), (Some(10), Some(0)));
    }

    #[test]
    fn a_decided_request_is_never_executed_again() {
        let store = bank(&[("alice", 100), ("bob", 0)]);
        let n = request(&store, "t1", "alice", "bob", "30");
        store.observe::<BankTransfer>(&n).unwrap();
        // The user rewrites the amount: a new notification, but the request was decided.
        store.put(TRANSFERS, "t1", AMOUNT, "50");
        let mut txn = store.begin();
        BankTransfer::observe(&mut txn, &store.notification(TRANSFERS, "t1", AMOUNT)).unwrap();
        assert!(txn.buffered().is_empty(), "no write at all: {:?}", txn.buffered());
        assert_eq!((balance(&store, "alice"), balance(&store, "bob")), (Some(70), Some(30)));
        assert_eq!(status(&store, "t1").as_deref(), Some("done"));
    }

    #[test]
    fn racing_transfers_from_one_account_conflict_so_it_never_overdraws() {
        let store = bank(&[("alice", 100), ("bob", 0), ("carol", 0)]);
        let n1 = request(&store, "t1", "alice", "bob", "60");
        let n2 = request(&store, "t2", "alice", "carol", "60");
        // Both runs see alice at 100 in their snapshots and both would succeed alone.
        let mut a = store.begin();
        let mut b = store.begin();
        BankTransfer::observe(&mut a, &n1).unwrap();
        BankTransfer::observe(&mut b, &n2).unwrap();
        a.commit().unwrap();
        assert!(b.commit().unwrap_err().is_conflict(), "both write alice's balance");
        // The host retries the loser on a fresh snapshot.
        store.observe::<BankTransfer>(&n2).unwrap();
        assert_eq!(status(&store, "t1").as_deref(), Some("done"));
        assert_eq!(status(&store, "t2").as_deref(), Some("insufficient funds"));
        assert_eq!(
            (balance(&store, "alice"), balance(&store, "bob"), balance(&store, "carol")),
            (Some(40), Some(60), Some(0))
        );
    }

    #[test]
    fn transfers_between_disjoint_accounts_do_not_conflict() {
        let store = bank(&[("a", 10), ("b", 0), ("c", 10), ("d", 0)]);
        let n1 = request(&store, "t1", "a", "b", "5");
        let n2 = request(&store, "t2", "c", "d", "5");
        let mut x = store.begin();
        let mut y = store.begin();
        BankTransfer::observe(&mut x, &n1).unwrap();
        BankTransfer::observe(&mut y, &n2).unwrap();
        x.commit().unwrap();
        y.commit().unwrap();
        assert_eq!([balance(&store, "b"), balance(&store, "d")], [Some(5), Some(5)]);
    }
}
