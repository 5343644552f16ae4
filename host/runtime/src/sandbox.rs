//! What a guest may reach besides the `percolator:observer` imports: WASI 0.2, deny-by-default.
//!
//! Standard toolchains (componentize-py, componentize-js) produce components that import
//! WASI even when the observer never touches a file: their language runtimes print, read the
//! clock and seed hash maps. The host links all of WASI 0.2 (`wasmtime-wasi`, p2, the version
//! matching wasmtime) so those components load, and gives every instance a context in which:
//!
//! - no folder is preopened (every filesystem call fails: there is no descriptor to open from);
//! - the environment and the arguments are empty; stdin is closed (end of stream);
//! - TCP, UDP and name lookups are refused (`allow_tcp(false)`, `allow_udp(false)`,
//!   `allow_ip_name_lookup(false)`, and no address passes the address check);
//! - stdout and stderr go into bounded buffers ([`Capture`]), taken after every run: their
//!   lines go into the host's log (under the observer's name) and the end of stderr into the
//!   error (and so the dead letter) of a failed run, where a Python or JavaScript exception
//!   prints its message;
//! - the clocks and the random generators are the host's ([`ClockMode::Real`], no seed), or
//!   fixed and seeded per run ([`ClockMode::Fixed`], [`Environment::random_seed`]) for
//!   deterministic replays.

use std::collections::{BTreeMap, VecDeque};
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use rand::{SeedableRng, TryRng};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};
use wasmtime_wasi::{HostMonotonicClock, HostWallClock, WasiCtx, WasiCtxBuilder};

/// Bytes of one stream kept per run: the last ones (a traceback ends with its message).
pub(crate) const CAPTURE_BYTES: usize = 16 << 10;

/// Bytes of stderr's end carried into a failed run's error.
const ERROR_TAIL_BYTES: usize = 1000;

/// The wall clock's value under [`ClockMode::Fixed`]: 2000-01-01T00:00:00Z.
const FIXED_WALL_CLOCK: Duration = Duration::from_secs(946_684_800);

/// The clocks a guest reads through WASI.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ClockMode {
    /// The host's wall and monotonic clocks.
    #[default]
    Real,
    /// The wall clock stands at 2000-01-01T00:00:00Z and the monotonic clock at 0, in every
    /// run: a guest that reads the time behaves the same in every replay.
    Fixed,
}

/// What one binding's guest sees besides the store: its parameters (`config` interface of
/// `percolator:observer@0.2.0` and later), its clocks and its randomness.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Environment {
    /// The binding's parameters (`[binding.params]`), as text.
    pub params: Arc<BTreeMap<String, String>>,
    /// Real or fixed clocks.
    pub clock: ClockMode,
    /// With a seed, both WASI random generators restart from it at every run (the insecure
    /// seed is the seed too); without, they are the host's (unpredictable).
    pub random_seed: Option<u64>,
}

impl Environment {
    /// Fixed clocks or seeded randomness: every run gets a fresh instance, so that what a run
    /// sees does not depend on what earlier runs of a reused instance did (a language
    /// runtime's lazy start-up draws random bytes on its first call only, say).
    pub fn deterministic(&self) -> bool {
        self.clock == ClockMode::Fixed || self.random_seed.is_some()
    }
}

/// A bounded output stream: the guest's stdout or stderr. Keeps the last [`CAPTURE_BYTES`] of
/// a run and counts what it dropped; never fails a write (a guest that prints too much loses
/// its oldest output, not its run).
#[derive(Clone, Default)]
pub(crate) struct Capture(Arc<Mutex<Captured>>);

#[derive(Default)]
struct Captured {
    bytes: VecDeque<u8>,
    dropped: u64,
}

/// What a stream held at the end of a run.
#[derive(Debug, Default)]
pub(crate) struct Output {
    pub(crate) text: String,
    /// Bytes written before the kept ones, dropped.
    pub(crate) dropped: u64,
}

impl Capture {
    fn push(&self, data: &[u8]) {
        let Ok(mut c) = self.0.lock() else { return };
        c.bytes.extend(data);
        let excess = c.bytes.len().saturating_sub(CAPTURE_BYTES);
        if excess > 0 {
            c.bytes.drain(..excess);
            c.dropped += excess as u64;
        }
    }

    /// Takes what was written since the last take.
    pub(crate) fn take(&self) -> Output {
        let Ok(mut c) = self.0.lock() else { return Output::default() };
        let bytes: Vec<u8> = c.bytes.drain(..).collect();
        Output { text: String::from_utf8_lossy(&bytes).into_owned(), dropped: std::mem::take(&mut c.dropped) }
    }
}

impl Output {
    pub(crate) fn is_empty(&self) -> bool {
        self.text.is_empty() && self.dropped == 0
    }

    /// The end of the text, on one line, for an error: at most [`ERROR_TAIL_BYTES`], the last
    /// non-empty lines joined with " | ".
    pub(crate) fn tail(&self) -> Option<String> {
        let lines: Vec<&str> = self.text.lines().map(str::trim_end).filter(|l| !l.trim().is_empty()).collect();
        if lines.is_empty() {
            return None;
        }
        let mut kept = Vec::new();
        let mut size = 0;
        for line in lines.iter().rev() {
            if size + line.len() > ERROR_TAIL_BYTES && !kept.is_empty() {
                break;
            }
            size += line.len() + 3;
            kept.push(line.trim());
        }
        kept.reverse();
        let cut = kept.len() < lines.len() || self.dropped > 0;
        let mut text = kept.join(" | ");
        if text.len() > ERROR_TAIL_BYTES {
            let start = text.ceil_char_boundary(text.len() - ERROR_TAIL_BYTES);
            text = text[start..].to_owned();
        }
        Some(if cut { format!("… {text}") } else { text })
    }
}

impl IsTerminal for Capture {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for Capture {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl OutputStream for Capture {
    fn write(&mut self, bytes: bytes::Bytes) -> StreamResult<()> {
        self.push(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(CAPTURE_BYTES)
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for Capture {
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for Capture {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        self.push(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// A random generator shared by an instance's WASI context and the host, which restarts it
/// from the binding's seed before every run.
#[derive(Clone)]
pub(crate) struct Seeded(Arc<Mutex<rand::rngs::StdRng>>);

impl Seeded {
    fn new(seed: u64) -> Seeded {
        Seeded(Arc::new(Mutex::new(rand::rngs::StdRng::seed_from_u64(seed))))
    }

    /// Restarts the sequence from `seed`.
    pub(crate) fn reseed(&self, seed: u64) {
        if let Ok(mut rng) = self.0.lock() {
            *rng = rand::rngs::StdRng::seed_from_u64(seed);
        }
    }
}

impl TryRng for Seeded {
    type Error = Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Infallible> {
        let mut b = [0; 4];
        self.try_fill_bytes(&mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    fn try_next_u64(&mut self) -> Result<u64, Infallible> {
        let mut b = [0; 8];
        self.try_fill_bytes(&mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Infallible> {
        match self.0.lock() {
            Ok(mut rng) => rng.try_fill_bytes(dst),
            Err(_) => {
                dst.fill(0);
                Ok(())
            }
        }
    }
}

struct FixedWall;

impl HostWallClock for FixedWall {
    fn resolution(&self) -> Duration {
        Duration::from_secs(1)
    }

    fn now(&self) -> Duration {
        FIXED_WALL_CLOCK
    }
}

struct FixedMonotonic;

impl HostMonotonicClock for FixedMonotonic {
    fn resolution(&self) -> u64 {
        1_000_000_000
    }

    fn now(&self) -> u64 {
        0
    }
}

/// One instance's WASI context and the handles the host keeps on it.
pub(crate) struct Wasi {
    pub(crate) ctx: WasiCtx,
    pub(crate) stdout: Capture,
    pub(crate) stderr: Capture,
    /// The seeded generators (secure, insecure), restarted before every run.
    pub(crate) seeded: Option<(Seeded, Seeded)>,
}

impl Wasi {
    /// A deny-by-default context (see the module's documentation).
    pub(crate) fn new(env: &Environment) -> Wasi {
        let (stdout, stderr) = (Capture::default(), Capture::default());
        let mut b = WasiCtxBuilder::new();
        // No preopens, no environment, no arguments, stdin closed: the builder's defaults,
        // which nothing below changes.
        b.stdout(stdout.clone()).stderr(stderr.clone());
        b.allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .socket_addr_check(|_, _| Box::pin(async { false }));
        if env.clock == ClockMode::Fixed {
            b.wall_clock(FixedWall).monotonic_clock(FixedMonotonic);
        }
        let seeded = env.random_seed.map(|seed| {
            let (secure, insecure) = (Seeded::new(seed), Seeded::new(seed));
            b.secure_random(secure.clone()).insecure_random(insecure.clone()).insecure_random_seed(u128::from(seed));
            (secure, insecure)
        });
        Wasi { ctx: b.build(), stdout, stderr, seeded }
    }

    /// Before a run: the seeded generators restart from `seed`.
    pub(crate) fn start_run(&self, seed: Option<u64>) {
        if let (Some((secure, insecure)), Some(seed)) = (&self.seeded, seed) {
            secure.reseed(seed);
            insecure.reseed(seed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_capture_keeps_the_last_bytes_and_counts_the_rest() {
        let c = Capture::default();
        c.push(b"first line\n");
        let out = c.take();
        assert_eq!((out.text.as_str(), out.dropped), ("first line\n", 0));
        assert!(c.take().is_empty(), "a take empties it");
        c.push(&vec![b'x'; CAPTURE_BYTES]);
        c.push(b"\nZeroDivisionError: division by zero\n");
        let out = c.take();
        assert_eq!(out.text.len(), CAPTURE_BYTES);
        assert_eq!(out.dropped, 37);
        assert!(out.text.ends_with("ZeroDivisionError: division by zero\n"));
    }

    #[test]
    fn a_tail_is_the_last_lines_on_one_line() {
        let out = Output {
            text: "Traceback (most recent call last):\n  File \"app.py\", line 3, in observe\n\nZeroDivisionError: division by zero\n".into(),
            dropped: 0,
        };
        assert_eq!(
            out.tail().unwrap(),
            "Traceback (most recent call last): | File \"app.py\", line 3, in observe | ZeroDivisionError: division by zero"
        );
        let long = Output { text: format!("{}\nlast\n", "y".repeat(5000)), dropped: 0 };
        let tail = long.tail().unwrap();
        assert!(tail.starts_with("… ") && tail.ends_with("last") && tail.len() < ERROR_TAIL_BYTES + 10, "{tail}");
        assert_eq!(Output { text: "\n \n".into(), dropped: 0 }.tail(), None);
    }

    #[test]
    fn a_seeded_generator_restarts_at_every_run() {
        let mut s = Seeded::new(7);
        let first = s.try_next_u64().unwrap();
        assert_ne!(s.try_next_u64().unwrap(), first);
        s.reseed(7);
        assert_eq!(s.try_next_u64().unwrap(), first);
    }
}
