//! Observer runs in flight vs throughput: the scanner's worker pool at fsync durability.
//!
//! A redb store (durability fsync) with one observer on `docs/in:v` that reads the changed
//! value and writes two rows (`docs/<row> out:v` and `index/<row> n:v`): a two-row transaction,
//! one fsync'd commit. N rows are written (with the observer not yet running), then a scanner
//! starts with 2 scanning threads and W workers, and the time until every notification has run
//! is measured. W = 0 runs observers on the 2 scanning threads (the design before the pool).
//!
//! `cargo run --release -p percolator-bench --bin observers` (about 1 minute);
//! `-- --quick` (fewer rows and pool sizes: a smoke test); `-- --rows N --workers 0,2,8,32,64`.
//!
//! Prints `observers_w<W>_runs_per_s` and `observers_w<W>_ratio_vs_first` (vs the first W given) lines.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use percolator_store::{
    Durability, Notification, NotifyKind, ObserveError, Observer, ObserverSpec, RedbConfig, ScannerConfig, Store,
    StoreConfig, Transaction,
};

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

struct Copy(Arc<AtomicU64>);

impl Observer for Copy {
    fn observe(&self, t: &mut Transaction, n: &Notification) -> Result<(), ObserveError> {
        let c = &n.cell;
        let v = t.get(&c.table, &c.row, &c.column)?.unwrap_or_default();
        t.set(&c.table, &c.row, "out:v", v.clone())?;
        t.set("index", &c.row, "n:v", (v.len() as u64).to_be_bytes())?;
        self.0.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

fn run(dir: &std::path::Path, rows: u64, workers: usize) -> Res<f64> {
    let path = dir.join(format!("observers-{workers}.redb"));
    let store =
        Store::open(&path, StoreConfig::default(), RedbConfig { durability: Durability::Fsync, ..Default::default() })?;
    let runs = Arc::new(AtomicU64::new(0));
    let spec = ObserverSpec {
        name: "copy".into(),
        table: "docs".into(),
        column: "in:v".into(),
        kind: NotifyKind::Strong,
        max_attempts: 3,
    };
    store.register_observer(spec, Arc::new(Copy(runs.clone())))?;
    for chunk in (0..rows).collect::<Vec<_>>().chunks(1000) {
        store.run(|t| {
            for &i in chunk {
                t.set("docs", format!("r{i:08}"), "in:v", format!("value {i}"))?;
            }
            Ok(())
        })?;
    }
    let started = Instant::now();
    let scanner = store.start_scanner(ScannerConfig { threads: 2, workers, ..ScannerConfig::default() });
    while runs.load(Ordering::Relaxed) < rows {
        if started.elapsed() > Duration::from_secs(600) {
            return Err(
                format!("workers {workers}: {} of {rows} runs after 10 minutes", runs.load(Ordering::Relaxed)).into()
            );
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let secs = started.elapsed().as_secs_f64();
    scanner.stop();
    drop(store);
    let _ = std::fs::remove_file(&path);
    Ok(rows as f64 / secs)
}

fn main() -> Res<()> {
    let mut rows = 5000u64;
    let mut workers = vec![0usize, 2, 8, 32, 64];
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--quick" => {
                rows = 1000;
                workers = vec![0, 8];
            }
            "--rows" => rows = args.next().ok_or("--rows needs a value")?.parse()?,
            "--workers" => {
                workers = args
                    .next()
                    .ok_or("--workers needs a value")?
                    .split(',')
                    .map(|w| w.trim().parse())
                    .collect::<Result<_, _>>()?
            }
            other => return Err(format!("unknown argument {other:?}").into()),
        }
    }
    let dir = std::env::temp_dir().join(format!("percolator-observers-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    println!("# {rows} notifications, observer = 2-row transaction, durability fsync, 2 scanning threads");
    let mut base = None;
    for w in workers {
        let rate = run(&dir, rows, w)?;
        println!("observers_w{w}_runs_per_s {rate:.1}");
        let b = *base.get_or_insert(rate);
        println!("observers_w{w}_ratio_vs_first {:.3}", rate / b);
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
