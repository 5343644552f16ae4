//! Snapshots across requests: reading at a named timestamp ([`Store::begin_at`]), the
//! persisted GC safepoint those reads are fenced on, and pins ([`Store::pin_snapshot`]) that
//! hold GC below a snapshot for a while. The argument is in `docs/design.md`, "Snapshots
//! across requests".

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::bigtable::Op;
use crate::error::{Error, Result};
use crate::store::{Inner, Store};
use crate::timestamp::Timestamp;
use crate::transaction::Transaction;
use crate::worker::now_ms;

/// The longest TTL a pin may have (a week); renew it to keep it longer.
pub const MAX_PIN_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// Metadata keys `gc/safepoint/<worker>`: each store's persisted GC safepoint.
const SAFEPOINT_PREFIX: &str = "gc/safepoint/";
/// Metadata keys `pin/<id>`: the pins.
const PIN_PREFIX: &str = "pin/";

/// A pinned snapshot: GC keeps every version a read at `ts` needs until `expires`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Pin {
    /// Its id (a timestamp from the oracle, so unique).
    pub id: u64,
    /// The snapshot it holds.
    pub ts: Timestamp,
    /// When it stops holding GC (wall clock), unless renewed.
    pub expires: SystemTime,
}

impl Pin {
    /// True once its expiry has passed: GC no longer keeps its snapshot.
    pub fn expired(&self) -> bool {
        SystemTime::now() >= self.expires
    }

    fn expires_ms(&self) -> u64 {
        self.expires.duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
    }

    fn encode(&self) -> Vec<u8> {
        let mut v = self.ts.raw().to_le_bytes().to_vec();
        v.extend_from_slice(&self.expires_ms().to_le_bytes());
        v
    }

    fn decode(key: &str, value: &[u8]) -> Result<Pin> {
        let bad = || Error::Corrupt(format!("metadata {key:?} is not a pin"));
        let id = key.strip_prefix(PIN_PREFIX).and_then(|id| id.parse().ok()).ok_or_else(bad)?;
        let word = |i: usize| value.get(i..i + 8).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
        let (ts, ms) = match (value.len(), word(0), word(8)) {
            (16, Some(ts), Some(ms)) => (ts, ms),
            _ => return Err(bad()),
        };
        Ok(Pin { id, ts: Timestamp::from_raw(ts), expires: UNIX_EPOCH + Duration::from_millis(ms) })
    }
}

/// `ttl` from now, in whole milliseconds (as stored).
fn expiry_in(ttl: Duration) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(now_ms().saturating_add(ttl.as_millis() as u64))
}

fn pin_key(id: u64) -> String {
    format!("{PIN_PREFIX}{id:020}")
}

fn safepoint_key(worker: u64) -> String {
    format!("{SAFEPOINT_PREFIX}{worker:020}")
}

fn check_ttl(ttl: Duration) -> Result<()> {
    if ttl.is_zero() {
        return Err(Error::InvalidArgument("a pin's TTL must be more than zero".into()));
    }
    if ttl > MAX_PIN_TTL {
        return Err(Error::InvalidArgument(format!(
            "a pin's TTL of {}s is more than the maximum of {}s (a week); renew the pin to keep it longer",
            ttl.as_secs(),
            MAX_PIN_TTL.as_secs()
        )));
    }
    Ok(())
}

impl Store {
    /// Starts a read-only transaction whose snapshot is `ts` (a timestamp handed out before,
    /// e.g. the first page of a scan, or [`Store::pin_snapshot`]'s): its reads see every
    /// transaction that committed before `ts`. Writes are refused.
    ///
    /// Fails with [`Error::InvalidArgument`] if `ts` is above the oracle's current timestamp
    /// (a snapshot in the future is not yet stable) or zero, and with
    /// [`Error::SnapshotTooOld`] if it is below the persisted GC safepoint; each of its reads
    /// checks that again after it returned (a GC pass may have collected below `ts` since),
    /// so a read never returns part of a snapshot that GC has collected under.
    pub fn begin_at(&self, ts: Timestamp) -> Result<Transaction> {
        check_not_future(&self.inner, ts)?;
        // Registered first: from here on this store's GC stays at or below `ts`; a pass that
        // computed its safepoint before is caught by the check below or the reads' fence.
        let txn = Transaction::begin_at(self.inner.clone(), ts)?;
        check_fence(&self.inner, ts)?;
        Ok(txn)
    }

    /// The persisted GC safepoint: the highest safepoint any GC pass of any store on this
    /// backend wrote before it collected (zero if none ever ran). A read below it may miss
    /// versions.
    pub fn persisted_safepoint(&self) -> Result<Timestamp> {
        persisted_safepoint(&self.inner)
    }

    /// Pins a snapshot for `ttl`: GC (of every store on this backend) keeps every version a
    /// read at its timestamp needs until the pin expires or is released. `ts = None` pins
    /// the current timestamp (a fresh one from the oracle). Read at it with
    /// [`Store::begin_at`]; renew it with [`Store::renew_pin`], release it with
    /// [`Store::unpin`].
    ///
    /// Fails with [`Error::InvalidArgument`] for a TTL of zero or above [`MAX_PIN_TTL`] and
    /// for a `ts` in the future, with [`Error::SnapshotTooOld`] if `ts` is below the persisted
    /// safepoint (also when a GC pass raised it past `ts` while the pin was being written:
    /// the pin is removed again).
    pub fn pin_snapshot(&self, ts: Option<Timestamp>, ttl: Duration) -> Result<Pin> {
        check_ttl(ttl)?;
        let inner = &self.inner;
        // The id, and (for `None`) the snapshot, registered while the pin is written so this
        // store's GC does not pass it meanwhile.
        let id = inner.register_active()?;
        let result = (|| {
            let ts = match ts {
                Some(ts) => {
                    check_not_future(inner, ts)?;
                    check_fence(inner, ts)?;
                    ts
                }
                None => id,
            };
            let pin = Pin { id: id.raw(), ts, expires: expiry_in(ttl) };
            inner.backend.apply(vec![Op::MetaPut { key: pin_key(pin.id), value: pin.encode() }])?;
            // After the write: a GC pass that read the pins before it persisted its safepoint
            // first (docs/design.md, "Pins").
            if let Err(e) = check_fence(inner, ts) {
                inner.backend.apply(vec![Op::MetaDelete { key: pin_key(pin.id) }])?;
                return Err(e);
            }
            Ok(pin)
        })();
        inner.unregister_active(id);
        result
    }

    /// Extends pin `id` to expire `ttl` from now. Fails with [`Error::NotFound`] for an
    /// unknown (released, or expired and collected) pin, with [`Error::InvalidArgument`] for
    /// an expired one (GC may have collected under it; pin a new snapshot) or a bad TTL.
    pub fn renew_pin(&self, id: u64, ttl: Duration) -> Result<Pin> {
        check_ttl(ttl)?;
        let mut pin = self.pin(id)?;
        if pin.expired() {
            return Err(Error::InvalidArgument(format!(
                "pin {id} expired (at {} ms since the epoch): GC may have collected under its snapshot {}; \
                 pin a new snapshot",
                pin.expires_ms(),
                pin.ts
            )));
        }
        pin.expires = expiry_in(ttl);
        self.inner.backend.apply(vec![Op::MetaPut { key: pin_key(id), value: pin.encode() }])?;
        // A GC whose clock ran ahead may have taken it for expired meanwhile.
        check_fence(&self.inner, pin.ts)?;
        Ok(pin)
    }

    /// Releases pin `id`: GC no longer keeps its snapshot. [`Error::NotFound`] if there is no
    /// such pin (released before, or expired and collected).
    pub fn unpin(&self, id: u64) -> Result<Pin> {
        let pin = self.pin(id)?;
        self.inner.backend.apply(vec![Op::MetaDelete { key: pin_key(id) }])?;
        Ok(pin)
    }

    /// Every pin in the store, expired ones included until a GC pass removes them, by id.
    pub fn pins(&self) -> Result<Vec<Pin>> {
        pins(&self.inner)
    }

    fn pin(&self, id: u64) -> Result<Pin> {
        match self.inner.backend.meta_get(&pin_key(id))? {
            Some(v) => Pin::decode(&pin_key(id), &v),
            None => Err(Error::NotFound(format!(
                "no pin {id} (never made, released, or collected after it expired); `snapshot --ttl` makes one"
            ))),
        }
    }
}

fn pins(inner: &Inner) -> Result<Vec<Pin>> {
    inner.backend.meta_scan(PIN_PREFIX)?.into_iter().map(|(k, v)| Pin::decode(&k, &v)).collect()
}

/// Refuses a snapshot above the oracle's current timestamp (or zero, before everything).
fn check_not_future(inner: &Inner, ts: Timestamp) -> Result<()> {
    if ts == Timestamp::ZERO {
        return Err(Error::InvalidArgument("snapshot timestamp 0 is before every commit: not a snapshot".into()));
    }
    let now = inner.oracle.next()?;
    if ts > now {
        return Err(Error::InvalidArgument(format!(
            "snapshot timestamp {ts} is in the future (the oracle is at {now}): a snapshot above the current \
             timestamp is not yet stable"
        )));
    }
    Ok(())
}

/// The maximum over every store's persisted safepoint.
pub(crate) fn persisted_safepoint(inner: &Inner) -> Result<Timestamp> {
    let mut max = Timestamp::ZERO;
    for (key, value) in inner.backend.meta_scan(SAFEPOINT_PREFIX)? {
        let raw = <[u8; 8]>::try_from(value.as_slice())
            .map_err(|_| Error::Corrupt(format!("metadata {key:?} is not an 8-byte timestamp")))?;
        max = max.max(Timestamp::from_raw(u64::from_le_bytes(raw)));
    }
    Ok(max)
}

/// Fails if GC may have collected under a snapshot at `ts` (run after a read returned, and
/// before a snapshot is handed out).
pub(crate) fn check_fence(inner: &Inner, ts: Timestamp) -> Result<()> {
    let safepoint = persisted_safepoint(inner)?;
    if ts < safepoint {
        return Err(Error::SnapshotTooOld { ts, safepoint });
    }
    Ok(())
}

/// For a GC pass, holding the store's GC lock (`collected`: the highest safepoint this store
/// removed anything at): lowers the `candidate` safepoint to every unexpired pin, persists it
/// (at least `collected`), reads the pins again and lowers it further to any pin that appeared
/// meanwhile; then removes expired pins and the safepoint keys of stores that are gone and
/// below `collected`. Returns the safepoint the pass may collect at, which `collected` now
/// covers.
pub(crate) fn settle_safepoint(inner: &Inner, candidate: Timestamp, collected: &mut Timestamp) -> Result<Timestamp> {
    let now = now_ms();
    let live_min = |pins: &[Pin]| pins.iter().filter(|p| p.expires_ms() > now).map(|p| p.ts).min();
    let first = pins(inner)?;
    let mut safepoint = live_min(&first).map_or(candidate, |p| candidate.min(p));
    let own = safepoint_key(inner.worker);
    let persist = |s: Timestamp| -> Result<()> {
        let value = (*collected).max(s).raw().to_le_bytes().to_vec();
        inner.backend.apply(vec![Op::MetaPut { key: own.clone(), value }]).map(drop)
    };
    persist(safepoint)?;
    let second = pins(inner)?;
    if let Some(p) = live_min(&second)
        && p < safepoint
    {
        safepoint = p;
        persist(safepoint)?;
    }
    *collected = (*collected).max(safepoint);
    // Housekeeping: expired pins, and keys of gone stores below what this one keeps.
    let mut ops: Vec<Op> =
        second.iter().filter(|p| p.expires_ms() <= now).map(|p| Op::MetaDelete { key: pin_key(p.id) }).collect();
    for (key, value) in inner.backend.meta_scan(SAFEPOINT_PREFIX)? {
        let worker = key.strip_prefix(SAFEPOINT_PREFIX).and_then(|w| w.parse::<u64>().ok());
        let below = <[u8; 8]>::try_from(value.as_slice()).is_ok_and(|v| u64::from_le_bytes(v) < collected.raw());
        if let Some(w) = worker
            && below
            && !inner.worker_alive(w)?
        {
            ops.push(Op::MetaDelete { key });
        }
    }
    if !ops.is_empty() {
        inner.backend.apply(ops)?;
    }
    Ok(safepoint)
}
