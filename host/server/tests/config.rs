//! Configuration errors name the file, the line and the field.

use std::path::PathBuf;

use percolator_server::config::{Backend, Config, RedisSettings};
use percolator_store::{Durability, NotifyKind};

struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let p = std::env::temp_dir().join(format!("percolator-config-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(p.join("observers")).unwrap();
        for f in ["a.wasm", "b.wasm"] {
            std::fs::write(p.join("observers").join(f), b"\0asm\x01\0\0\0").unwrap();
        }
        Dir(p)
    }
    fn config(&self, body: &str) -> PathBuf {
        let f = self.0.join("pipeline.toml");
        std::fs::write(&f, body).unwrap();
        f
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const HEAD: &str = "[store]\npath = \"data/store.redb\"\n\n[observers]\ndir = \"observers\"\n";

fn err(dir: &Dir, body: &str) -> String {
    Config::load(&dir.config(body)).unwrap_err().to_string()
}

fn binding(name: &str, wasm: &str, column: &str, extra: &str) -> String {
    format!("\n[[binding]]\nname = \"{name}\"\nwasm = \"{wasm}\"\ntable = \"docs\"\ncolumn = \"{column}\"\n{extra}")
}

#[test]
fn a_valid_config_is_parsed_into_domain_types() {
    let dir = Dir::new("valid");
    let body = format!(
        "{HEAD}[scanner]\nthreads = 3\nworkers = 16\n{}{}",
        binding("up", "a.wasm", "raw:text", "writes = [\"docs/derived:*\"]\ntimeout_ms = 250\nmemory_mb = 16\n"),
        binding("count", "b.wasm", "derived:upper", "notify = \"weak\"\nreads = [\"docs/raw:text\"]\n"),
    );
    let c = Config::load(&dir.config(&body)).unwrap();
    assert_eq!(
        c.backend,
        Backend::Redb {
            durability: Durability::Fsync,
            compact_when_quiet: Some(std::time::Duration::from_secs(30)),
            cache_bytes: 1 << 30,
        }
    );
    assert_eq!((c.scanner_threads, c.observer_workers), (3, 16));
    assert_eq!(c.bindings[0].limits.pool, 16, "an observer keeps a warm instance per run in flight");
    assert_eq!(c.store_path, dir.0.join("data/store.redb"));
    assert_eq!(c.cache_dir, dir.0.join("data/store.cache"));
    assert_eq!(c.bindings.len(), 2);
    let up = &c.bindings[0];
    assert_eq!((up.name.as_str(), up.kind), ("up", NotifyKind::Strong));
    assert!(up.access.can_write("docs", "derived:upper") && !up.access.can_write("docs", "raw:text"));
    assert!(up.access.can_read("docs", "raw:text"), "the observed column is readable");
    assert_eq!(up.limits.timeout.as_millis(), 250);
    assert_eq!(up.limits.memory_bytes, 16 << 20);
    assert_eq!(c.bindings[1].kind, NotifyKind::Weak);
}

#[test]
fn sandbox_settings_limits_and_parameters_are_parsed_and_checked() {
    use percolator_runtime::{ClockMode, Limits};
    let dir = Dir::new("sandbox");
    let extra = "max_instances = 40\nmax_memories = 2\nclock = \"fixed\"\nrandom_seed = 7\n\
                 [binding.params]\ntarget = \"derived:shout\"\nthreshold = 3\nloud = true\n";
    let c = Config::load(&dir.config(&format!("{HEAD}{}", binding("up", "a.wasm", "raw:text", extra)))).unwrap();
    let up = &c.bindings[0];
    assert_eq!((up.limits.instances, up.limits.memories, up.limits.tables), (40, 2, Limits::DEFAULT.tables));
    assert_eq!((up.env.clock, up.env.random_seed), (ClockMode::Fixed, Some(7)));
    let params: Vec<(&str, &str)> = up.env.params.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    assert_eq!(params, [("loud", "true"), ("target", "derived:shout"), ("threshold", "3")]);
    let plain = Config::load(&dir.config(&format!("{HEAD}{}", binding("up", "a.wasm", "raw:text", "")))).unwrap();
    assert_eq!(plain.bindings[0].limits.memory_bytes, Limits::DEFAULT.memory_bytes);
    assert_eq!((plain.bindings[0].env.clock, plain.bindings[0].env.random_seed), (ClockMode::Real, None));

    let e = err(&dir, &format!("{HEAD}{}", binding("up", "a.wasm", "raw:text", "clock = \"sundial\"\n")));
    assert!(e.contains("binding[0].clock") && e.contains("\"sundial\" is not one of \"real\", \"fixed\""), "{e}");
    let e = err(&dir, &format!("{HEAD}{}", binding("up", "a.wasm", "raw:text", "max_instances = 0\n")));
    assert!(e.contains("binding[0].max_instances") && e.contains("out of range"), "{e}");
    let e = err(&dir, &format!("{HEAD}{}", binding("up", "a.wasm", "raw:text", "random_seed = -1\n")));
    assert!(e.contains("binding[0].random_seed") && e.contains("negative"), "{e}");
    let e = err(&dir, &format!("{HEAD}{}", binding("up", "a.wasm", "raw:text", "[binding.params]\nlist = [1, 2]\n")));
    assert!(e.contains("binding[0].params") && e.contains("\"list\" is a list"), "{e}");
    let e = err(&dir, &format!("{HEAD}{}", binding("up", "a.wasm", "raw:text", "params = \"target\"\n")));
    assert!(e.contains("binding[0].params") && e.contains("expected a table"), "{e}");
}

#[test]
fn unknown_keys_are_rejected_with_line_and_expected_keys() {
    let dir = Dir::new("unknown");
    let body = format!("{HEAD}{}", binding("up", "a.wasm", "raw:text", "retries = 3\n"));
    let e = err(&dir, &body);
    assert!(e.contains("pipeline.toml:12"), "{e}");
    assert!(e.contains("retries") && e.contains("max_attempts"), "names the bad key and the expected ones: {e}");
}

#[test]
fn missing_files_bad_values_and_duplicates_name_their_field() {
    let dir = Dir::new("errors");
    let e = err(&dir, &format!("{HEAD}{}", binding("up", "missing.wasm", "raw:text", "")));
    assert!(e.contains("binding[0].wasm") && e.contains("missing.wasm") && e.contains("does not exist"), "{e}");
    assert!(e.contains(":9:"), "line of the wasm key: {e}");

    let e =
        err(&dir, &format!("{HEAD}{}{}", binding("up", "a.wasm", "raw:text", ""), binding("up", "b.wasm", "c:x", "")));
    assert!(e.contains("binding[1].name") && e.contains("already used by binding[0]"), "{e}");

    let e = err(&dir, &HEAD.replace("[store]\n", "[store]\ndurability = \"sometimes\"\n"));
    assert!(e.contains("store.durability") && e.contains("\"sometimes\""), "{e}");

    let e = err(&dir, &format!("{HEAD}{}", binding("up", "a.wasm", "raw:text", "writes = [\"nocolumn\"]\n")));
    assert!(e.contains("binding[0].writes") && e.contains("table/column"), "{e}");

    let e = err(&dir, &format!("{HEAD}{}", binding("up", "a.wasm", "raw:text", "timeout_ms = 0\n")));
    assert!(e.contains("binding[0].timeout_ms") && e.contains("out of range"), "{e}");

    let e = err(&dir, &format!("{HEAD}{}", binding("bad name", "a.wasm", "raw:text", "")));
    assert!(e.contains("binding[0].name"), "{e}");

    let e = err(
        &dir,
        &format!(
            "{HEAD}{}{}",
            binding("s", "a.wasm", "raw:text", ""),
            binding("w", "b.wasm", "raw:text", "notify = \"weak\"\n")
        ),
    );
    assert!(e.contains("binding[1].notify") && e.contains("as strong by binding[0] and as weak here"), "{e}");

    let e = err(&dir, "[store]\npath = \"x\"\n[observers]\ndir = \"nowhere\"\n");
    assert!(e.contains("observers.dir") && e.contains("not a directory"), "{e}");

    let e = err(&dir, "[store]\npath = \"x\"\n[observers]\ndir = \"observers\"\ncache_dir = \"observers/cache\"\n");
    assert!(e.contains("observers.cache_dir"), "{e}");

    let e = err(&dir, &format!("{HEAD}{}", binding("up", "../a.wasm", "raw:text", "")));
    assert!(e.contains("binding[0].wasm") && e.contains("file name in observers.dir"), "{e}");

    let e = err(&dir, "[store\npath = 1");
    assert!(e.contains("pipeline.toml:1"), "syntax errors are located too: {e}");
}

#[test]
fn cycles_need_consent() {
    let dir = Dir::new("cycles");
    let a = binding("a", "a.wasm", "raw:text", "writes = [\"docs/derived:upper\"]\n");
    let b = binding("b", "b.wasm", "derived:upper", "writes = [\"docs/raw:text\"]\n");
    let e = err(&dir, &format!("{HEAD}{a}{b}"));
    assert!(e.contains("cycle") && e.contains("a -> b -> a"), "{e}");
    let selfloop = binding("s", "a.wasm", "raw:text", "writes = [\"docs/raw:*\"]\n");
    let e = err(&dir, &format!("{HEAD}{selfloop}"));
    assert!(e.contains("s -> s"), "{e}");
    // Allowed on every binding of the cycle: accepted.
    let a = a + "allow_cycle = true\n";
    let b = b + "allow_cycle = true\n";
    assert!(Config::load(&dir.config(&format!("{HEAD}{a}{b}"))).is_ok());
}

#[test]
fn observer_workers_default_and_bounds() {
    let dir = Dir::new("workers");
    let c = Config::load(&dir.config(&format!("{HEAD}{}", binding("up", "a.wasm", "raw:text", "")))).unwrap();
    assert_eq!((c.scanner_threads, c.observer_workers), (2, 8));
    assert_eq!(c.gc_interval, Some(std::time::Duration::from_secs(60)), "old versions are collected by default");
    let e = err(&dir, &format!("{HEAD}[scanner]\nworkers = 1000\n"));
    assert!(e.contains("pipeline.toml:7: scanner.workers: must be between 0 and 256"), "{e}");
    let c = Config::load(&dir.config(&format!("{HEAD}[scanner]\nthreads = 3\nworkers = 0\n"))).unwrap();
    assert_eq!(c.observer_workers, 0);
    let off = "[store]\npath = \"data/store.redb\"\ngc_interval_s = 0\n\n[observers]\ndir = \"observers\"\n";
    assert_eq!(Config::load(&dir.config(off)).unwrap().gc_interval, None);
    let e = err(&dir, &off.replace("= 0", "= -5"));
    assert!(e.contains("pipeline.toml:3: store.gc_interval_s: must be between 0 (off) and 86400"), "{e}");
}

/// A redb store's configuration with `line` added to its `[store]` (the line is line 3).
fn with_store_line(dir: &Dir, line: &str) -> Result<Config, percolator_server::config::ConfigError> {
    let text = format!("[store]\npath = \"data/store.redb\"\n{line}\n[observers]\ndir = \"observers\"\n");
    Config::load(&dir.config(&text))
}

/// The same for the Redis backend, with `line` in its `[store]`.
fn redis_with_store_line(line: &str) -> String {
    format!(
        "[store]\npath = \"data/store.redb\"\nbackend = \"redis\"\n{line}\n\
         [store.redis]\nnodes = [\"127.0.0.1:7000\"]\n[observers]\ndir = \"observers\"\n"
    )
}

#[test]
fn compaction_when_quiet_defaults_to_30_s_0_turns_it_off_and_only_redb_takes_it() {
    let dir = Dir::new("compactquiet");
    let quiet = |line: &str| {
        with_store_line(&dir, line).map(|c| match c.backend {
            Backend::Redb { compact_when_quiet, .. } => compact_when_quiet,
            other => panic!("{other:?}"),
        })
    };
    assert_eq!(quiet("").unwrap(), Some(std::time::Duration::from_secs(30)));
    assert_eq!(quiet("compact_when_quiet_s = 5").unwrap(), Some(std::time::Duration::from_secs(5)));
    assert_eq!(quiet("compact_when_quiet_s = 0").unwrap(), None);
    let e = quiet("compact_when_quiet_s = -1").unwrap_err().to_string();
    assert!(e.contains("pipeline.toml:3: store.compact_when_quiet_s: must be between 0 (off) and 86400"), "{e}");
    let e = err(&dir, &redis_with_store_line("compact_when_quiet_s = 5"));
    assert!(e.contains("store.compact_when_quiet_s: applies to the redb backend only"), "{e}");
    // A change needs a restart, and a rejected reload names it by its key.
    let load = |line: &str| with_store_line(&dir, line).unwrap();
    let changes = load("").restart_changes(&load("compact_when_quiet_s = 5"));
    assert_eq!(changes, vec!["store.compact_when_quiet_s (30s → 5s)".to_owned()]);
}

#[test]
fn the_page_cache_defaults_to_1_gib_is_set_in_mib_and_only_redb_takes_it() {
    let dir = Dir::new("cachemb");
    let cache = |line: &str| {
        with_store_line(&dir, line).map(|c| match c.backend {
            Backend::Redb { cache_bytes, .. } => cache_bytes,
            other => panic!("{other:?}"),
        })
    };
    assert_eq!(cache("").unwrap(), 1 << 30);
    assert_eq!(cache("cache_mb = 64").unwrap(), 64 << 20);
    for bad in ["cache_mb = 0", "cache_mb = -3", "cache_mb = 65537"] {
        let e = cache(bad).unwrap_err().to_string();
        assert!(e.contains("pipeline.toml:3: store.cache_mb: must be between 1 and 65536"), "{bad}: {e}");
    }
    let e = cache("cache_mb = \"1G\"").unwrap_err().to_string();
    assert!(e.contains("store.cache_mb") && e.contains("an integer"), "{e}");
    let e = err(&dir, &redis_with_store_line("cache_mb = 64"));
    assert!(e.contains("store.cache_mb: applies to the redb backend only"), "{e}");
    // A change needs a restart, named by its key.
    let load = |line: &str| with_store_line(&dir, line).unwrap();
    let changes = load("").restart_changes(&load("cache_mb = 256"));
    assert_eq!(changes, vec!["store.cache_mb (1024 → 256)".to_owned()]);
}

#[test]
fn the_status_line_interval_defaults_to_10_s_and_0_turns_it_off() {
    let dir = Dir::new("statuslog");
    let every = |log: &str| Config::load(&dir.config(&format!("{HEAD}{log}"))).map(|c| c.status_log_interval);
    assert_eq!(every("").unwrap(), Some(std::time::Duration::from_secs(10)));
    assert_eq!(every("[log]\nstatus_interval_s = 1\n").unwrap(), Some(std::time::Duration::from_secs(1)));
    assert_eq!(every("[log]\nstatus_interval_s = 0\n").unwrap(), None);
    let e = err(&dir, &format!("{HEAD}[log]\nstatus_interval_s = -1\n"));
    assert!(e.contains("pipeline.toml:7: log.status_interval_s: must be between 0 (off) and 86400"), "{e}");
    let e = err(&dir, &format!("{HEAD}[log]\nstatus_every = 1\n"));
    assert!(e.contains("status_every"), "{e}");
}

#[test]
fn the_cache_limit_defaults_to_4_gib_and_bad_ones_are_located() {
    let dir = Dir::new("cachelimit");
    let limit = |line: &str| {
        let text = format!("[store]\npath = \"data/store.redb\"\n[observers]\ndir = \"observers\"\n{line}\n");
        Config::load(&dir.config(&text)).map(|c| c.cache_max_bytes)
    };
    assert_eq!(limit("").unwrap(), 4 << 30);
    assert_eq!(limit("cache_max_mb = 100").unwrap(), 100 << 20);
    for bad in ["0", "-5", "16777217"] {
        let e = limit(&format!("cache_max_mb = {bad}")).unwrap_err().to_string();
        assert!(
            e.contains("pipeline.toml:5: observers.cache_max_mb: must be between 1 and 16777216 (megabytes)"),
            "{e}"
        );
    }
    let e = limit("cache_max_mb = \"1G\"").unwrap_err().to_string();
    assert!(e.contains("cache_max_mb") && e.contains("an integer"), "{e}");
    let changes = Config::load(&dir.config(&format!("{HEAD}cache_max_mb = 100\n")))
        .unwrap()
        .restart_changes(&Config::load(&dir.config(HEAD)).unwrap());
    assert_eq!(changes, vec!["observers.cache_max_mb (100 → 4096)".to_owned()]);
}

#[test]
fn type_errors_name_the_field_and_what_was_found() {
    let dir = Dir::new("types");
    let e = err(&dir, &format!("{HEAD}[scanner]\nthreads = \"two\"\n"));
    assert!(
        e.contains("pipeline.toml:7: scanner.threads: expected an integer, found the string \"two\""),
        "names the field, the expected type and the value: {e}"
    );
    assert!(!e.contains("i64"), "no serde type names: {e}");

    let e = err(&dir, &format!("{HEAD}{}", binding("up", "a.wasm", "raw:text", "timeout_ms = \"1000\"\n")));
    assert!(
        e.contains("pipeline.toml:12: binding[0].timeout_ms: expected an integer, found the string \"1000\""),
        "{e}"
    );

    let e = err(
        &dir,
        &format!(
            "{HEAD}{}{}",
            binding("up", "a.wasm", "raw:text", ""),
            binding("count", "b.wasm", "derived:upper", "reads = \"docs/raw:*\"\n")
        ),
    );
    assert!(e.contains("binding[1].reads: expected a list of strings"), "names the binding: {e}");
    assert!(e.contains("found the string \"docs/raw:*\" (write [\"docs/raw:*\"])"), "suggests the fix: {e}");
    assert!(e.contains("pipeline.toml:18:"), "{e}");

    let e = err(&dir, &format!("{HEAD}{}", binding("up", "a.wasm", "raw:text", "writes = [\"docs/x:*\", 5]\n")));
    assert!(e.contains("binding[0].writes[1]: expected a string, found the integer 5"), "{e}");

    let e = err(&dir, &format!("{HEAD}{}", binding("up", "a.wasm", "raw:text", "allow_cycle = \"yes\"\n")));
    assert!(e.contains("binding[0].allow_cycle: expected a boolean"), "{e}");

    let e = err(&dir, &HEAD.replace("path = \"data/store.redb\"", "path = 7"));
    assert!(e.contains("pipeline.toml:2: store.path: expected a string, found the integer 7"), "{e}");
}

#[test]
fn bindings_that_could_never_fire_are_refused() {
    let dir = Dir::new("never");
    let e = err(&dir, &format!("{HEAD}{}", binding("up", "a.wasm", "text", "")));
    assert!(e.contains("pipeline.toml:11: binding[0].column") && e.contains("\"family:qualifier\""), "{e}");
    assert!(e.contains("\"raw:text\""), "suggests the column a load writes: {e}");
    for column in [":text", "raw:"] {
        let e = err(&dir, &format!("{HEAD}{}", binding("up", "a.wasm", column, "")));
        assert!(
            e.contains("binding[0].column") && e.contains("family:qualifier") && !e.contains("loaded as"),
            "{column}: {e}"
        );
    }

    let body =
        format!("{HEAD}{}", binding("up", "a.wasm", "raw:text", "")).replace("table = \"docs\"", "table = \"_loads\"");
    let e = err(&dir, &body);
    assert!(e.contains("pipeline.toml:10: binding[0].table") && e.contains("\"_loads\" is reserved"), "{e}");
}

#[test]
fn the_redis_backend_is_configured_in_store_redis() {
    let dir = Dir::new("redis");
    let head = "[store]\npath = \"data/local.state\"\nbackend = \"redis\"\n";
    let tail = "\n[observers]\ndir = \"observers\"\n";
    let body = format!(
        "{head}[store.redis]\nnodes = [\"127.0.0.1:7100\", \"127.0.0.1:7101\"]\nnamespace = \"web\"\nbuckets = 32\n\
         degraded_writes = true\netcd = [\"http://127.0.0.1:12379\"]\noracle_listen = \"127.0.0.1:7400\"\n{tail}"
    );
    let c = Config::load(&dir.config(&body)).unwrap();
    assert_eq!(
        c.backend,
        Backend::Redis(RedisSettings {
            nodes: vec!["127.0.0.1:7100".into(), "127.0.0.1:7101".into()],
            namespace: "web".into(),
            buckets: 32,
            replicas: 1,
            degraded_writes: true,
            etcd: vec!["http://127.0.0.1:12379".into()],
            oracle_listen: "127.0.0.1:7400".parse().unwrap(),
        })
    );
    let bad = |redis: &str| err(&dir, &format!("{head}{redis}{tail}"));
    let e = bad("[store.redis]\nnodes = [\"localhost\"]\n");
    assert!(e.contains("store.redis.nodes[0]: \"localhost\" is not host:port"), "{e}");
    let e = bad("[store.redis]\nnodes = []\n");
    assert!(e.contains("store.redis.nodes: names no node"), "{e}");
    let e = bad("[store.redis]\nnodes = [\"h:1\"]\nnamespace = \"a{b}\"\n");
    assert!(e.contains("store.redis.namespace: must be non-empty, without braces"), "{e}");
    let e = bad("[store.redis]\nnodes = [\"h:1\"]\nbuckets = 0\n");
    assert!(e.contains("store.redis.buckets: must be between 1 and 4096"), "{e}");
    let e = bad("[store.redis]\nnodes = [\"h:1\"]\netcd = [\"127.0.0.1:2379\"]\n");
    assert!(e.contains("store.redis.etcd[0]: \"127.0.0.1:2379\" is not an http:// URL"), "{e}");
    let e = bad("[store.redis]\nnodes = [\"h:1\"]\noracle_listen = \"anywhere\"\n");
    assert!(e.contains("store.redis.oracle_listen: \"anywhere\" is not ip:port"), "{e}");
    let e = bad("[store.redis]\nnodes = [\"h:1\"]\nshards = 3\n");
    assert!(e.contains("shards"), "{e}");
    let e = err(&dir, &format!("[store]\npath = \"s\"\nbackend = \"cassandra\"{tail}"));
    assert!(e.contains(":3: store.backend: \"cassandra\" is not one of \"redb\", \"redis\""), "{e}");
    let e = err(&dir, &format!("[store]\npath = \"s\"\n[store.redis]\nnodes = [\"h:1\"]{tail}"));
    assert!(e.contains("store.redis: is set but store.backend is not \"redis\""), "{e}");
    let e = err(&dir, &format!("{head}durability = \"none\"\n[store.redis]\nnodes = [\"h:1\"]{tail}"));
    assert!(e.contains("store.durability: applies to the redb backend only"), "{e}");
}

#[test]
fn logged_columns_are_parsed_and_bad_ones_located() {
    let dir = Dir::new("changes");
    let ok = format!(
        "{HEAD}\n[[changes]]\ntable = \"docs\"\ncolumns = [\"doc:title\", \"doc:url\"]\nkeep_s = 60\n\n[[changes]]\ntable = \"idx\"\ncolumns = [\"t:n\"]\n"
    );
    let c = Config::load(&dir.config(&ok)).unwrap();
    let logged: Vec<(String, String)> = c.logged_columns().into_iter().collect();
    assert_eq!(logged, [("docs", "doc:title"), ("docs", "doc:url"), ("idx", "t:n")].map(|(t, c)| (t.into(), c.into())));
    assert_eq!(c.changes_keep(), std::time::Duration::from_secs(3600), "the longest keep (the default one)");
    for (body, want) in [
        ("[[changes]]\ntable = \"docs\"\ncolumns = []\n", ":9: changes[0].columns: is empty"),
        (
            "[[changes]]\ntable = \"docs\"\ncolumns = [\"title\"]\n",
            "changes[0].columns: \"title\" is not a \"family:qualifier\" column",
        ),
        ("[[changes]]\ntable = \"docs\"\ncolumns = [\"__x:y\"]\n", "changes[0].columns: \"__x:y\""),
        (
            "[[changes]]\ntable = \"\"\ncolumns = [\"a:b\"]\n",
            ":8: changes[0].table: invalid argument: table name is empty",
        ),
        (
            "[[changes]]\ntable = \"_loads\"\ncolumns = [\"a:b\"]\n",
            "changes[0].table: table \"_loads\" holds load checkpoints",
        ),
        (
            "[[changes]]\ntable = \"docs\"\ncolumns = [\"a:b\"]\nkeep_s = 0\n",
            ":10: changes[0].keep_s: 0 is not between 1 and",
        ),
        (
            "[[changes]]\ntable = \"docs\"\ncolumns = [\"a:b\"]\n[[changes]]\ntable = \"docs\"\ncolumns = [\"a:b\"]\n",
            "changes[1].columns: docs/a:b is already logged by changes[0]",
        ),
        ("[[changes]]\ntable = \"docs\"\ncolumns = [\"a:b\"]\nkeep = 5\n", "unknown field `keep`"),
    ] {
        let e = err(&dir, &format!("{HEAD}\n{body}"));
        assert!(e.contains(want), "{body}: {e}");
    }
}

#[test]
fn combined_columns_are_parsed_and_bad_ones_located() {
    use percolator_store::{CombineOp, CombineSpec, CombineType};
    let dir = Dir::new("combine");
    let ok = format!(
        "{HEAD}\n[[combine]]\ntable = \"tags\"\ncolumn = \"count:n\"\nop = \"sum\"\n\n[[combine]]\ntable = \"tags\"\n\
         column = \"seen:last\"\nop = \"max\"\ntype = \"f64\"\n\n[[combine]]\ntable = \"docs\"\ncolumn = \"doc:tags\"\n\
         op = \"set\"\n{}",
        binding("follow", "a.wasm", "doc:tags", "")
    );
    let c = Config::load(&dir.config(&ok)).unwrap();
    let spec = |t: &str, col: &str, op, ty| CombineSpec::new(t, col, op, ty).unwrap();
    assert_eq!(
        c.combined,
        vec![
            spec("tags", "count:n", CombineOp::Sum, CombineType::I64),
            spec("tags", "seen:last", CombineOp::Max, CombineType::F64),
            spec("docs", "doc:tags", CombineOp::Set, CombineType::Set),
        ],
        "types default to i64 (numeric ops) and set (set); a strong binding may observe one"
    );
    let combine = |fields: &str| format!("{HEAD}\n[[combine]]\n{fields}");
    for (body, want) in [
        (
            combine("table = \"t\"\ncolumn = \"a:b\"\nop = \"avg\"\n"),
            ":10: combine[0].op: \"avg\" is not one of sum, min, max, set",
        ),
        (
            combine("table = \"t\"\ncolumn = \"a:b\"\nop = \"sum\"\ntype = \"u8\"\n"),
            ":11: combine[0].type: \"u8\" is not one of i64, f64, set",
        ),
        (
            combine("table = \"t\"\ncolumn = \"a:b\"\nop = \"sum\"\ntype = \"set\"\n"),
            "combine[0].type: op sum does not apply to type set",
        ),
        (
            combine("table = \"t\"\ncolumn = \"a:b\"\nop = \"set\"\ntype = \"i64\"\n"),
            "combine[0].type: op set does not apply to type i64",
        ),
        (
            combine("table = \"t\"\ncolumn = \"count\"\nop = \"sum\"\n"),
            "combine[0].column: \"count\" is not a \"family:qualifier\"",
        ),
        (
            combine("table = \"_loads\"\ncolumn = \"a:b\"\nop = \"sum\"\n"),
            "combine[0].table: table \"_loads\" holds load",
        ),
        (combine("table = \"t\"\ncolumn = \"a:b\"\n"), "missing field `op`"),
        (
            combine(
                "table = \"t\"\ncolumn = \"a:b\"\nop = \"sum\"\n[[combine]]\ntable = \"t\"\ncolumn = \"a:b\"\nop = \"max\"\n",
            ),
            "combine[1].column: t/a:b is already declared by combine[0]",
        ),
        (
            format!(
                "{}{}",
                combine("table = \"docs\"\ncolumn = \"a:b\"\nop = \"sum\"\n"),
                binding("w", "a.wasm", "a:b", "notify = \"weak\"\n")
            ),
            "combine[0].column: docs/a:b is observed by the weak binding \"w\"",
        ),
    ] {
        let e = err(&dir, &body);
        assert!(e.contains(want), "want {want:?} in: {e}");
    }
}
