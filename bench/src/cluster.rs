//! What the benchmarks of the distributed mode (`--bin distributed`, `--bin hosts`) share:
//! finding the dev cluster and printing a figure.

/// A benchmark's result.
pub(crate) type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// The comma-separated list in environment variable `name` (`scripts/dev-cluster` writes them).
pub(crate) fn env_list(name: &str) -> Res<Vec<String>> {
    let v =
        std::env::var(name).map_err(|_| format!("{name} is not set: run scripts/dev-cluster up and source its env"))?;
    Ok(v.split(',').map(|s| s.trim().to_string()).collect())
}

/// Prints one figure as `name value`.
pub(crate) fn print(name: &str, value: f64) {
    println!("{name} {value:.3}");
}
