//! The `webindex` binary: `sample-crawl` and `query`, against a store loaded with `percolator
//! load` (no host runs: both binaries take the store-file route; `webindex.rs` covers a host).

use std::path::PathBuf;
use std::process::{Command, Output};

#[path = "../../../host/tests/common/mod.rs"]
mod common;

/// A temp dir with `p.toml` (no bindings); removed on drop.
struct Sandbox {
    dir: PathBuf,
}

impl Sandbox {
    fn new(name: &str) -> Sandbox {
        let dir = std::env::temp_dir().join(format!("percolator-webindex-cli-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("observers")).unwrap();
        std::fs::write(
            dir.join("p.toml"),
            "[store]\npath = \"store.redb\"\ndurability = \"none\"\n[observers]\ndir = \"observers\"\n",
        )
        .unwrap();
        Sandbox { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn write(&self, name: &str, content: &str) {
        std::fs::write(self.path(name), content).unwrap();
    }

    fn command(&self, program: PathBuf, args: &[&str]) -> Output {
        Command::new(program)
            .current_dir(&self.dir)
            .env_remove("PERCOLATOR_TOKEN")
            .env_remove("PERCOLATOR_CONFIG")
            .env_remove("RUST_LOG")
            .arg("--config")
            .arg(self.path("p.toml"))
            .args(args)
            .output()
            .unwrap()
    }

    /// `percolator ARGS`, expected to succeed.
    fn percolator(&self, args: &[&str]) -> String {
        ok(self.command(common::percolator_bin(), args), args)
    }

    fn webindex_run(&self, args: &[&str]) -> Output {
        self.command(PathBuf::from(env!("CARGO_BIN_EXE_webindex")), args)
    }

    /// `webindex ARGS`, expected to succeed.
    fn webindex(&self, args: &[&str]) -> String {
        ok(self.webindex_run(args), args)
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn ok(out: Output, args: &[&str]) -> String {
    assert!(out.status.success(), "{args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn query_ranks_pages_of_a_hand_written_index() {
    let sb = Sandbox::new("query");
    sb.write(
        "index.jsonl",
        "{\"row\": \"snapshot http://a.example/\", \"count\": 3}\n\
         {\"row\": \"snapshot http://b.example/\", \"count\": 1}\n\
         {\"row\": \"snapshot http://c.example/\", \"count\": 2}\n\
         {\"row\": \"isolation http://a.example/\", \"count\": 1}\n\
         {\"row\": \"isolation http://b.example/\", \"count\": 4}\n\
         {\"row\": \"isolationist http://c.example/\", \"count\": 9}\n\
         {\"row\": \" http://a.example/\", \"count\": 100}\n\
         {\"row\": \" http://b.example/\", \"count\": 10}\n\
         {\"row\": \" http://c.example/\", \"count\": 1000}\n",
    );
    sb.percolator(&["load", "index", "index.jsonl", "--family", "hit"]);
    sb.write("titles.csv", "url,title\nhttp://a.example/,Alpha\nhttp://b.example/,\"Beta, the second\"\n");
    sb.percolator(&["load", "pages", "titles.csv", "--key", "url", "--family", "doc"]);
    // BM25: b (short, mostly about isolation) above a; c (1000 terms) below both for
    // "snapshot" although it has it twice. Lengths are the `index/" <url>"` rows.
    let hits = |out: String| -> Vec<(String, String, f64, String)> {
        out.lines()
            .map(|l| {
                let f: Vec<&str> = l.split('\t').collect();
                (f[0].to_owned(), f[1].to_owned(), f[2].parse().unwrap(), f[3].to_owned())
            })
            .collect()
    };
    let both = hits(sb.webindex(&["query", "Snapshot", "isolation"]));
    let urls: Vec<_> = both.iter().map(|h| (h.0.as_str(), h.1.as_str(), h.3.as_str())).collect();
    assert_eq!(urls, [("1", "http://b.example/", "Beta, the second"), ("2", "http://a.example/", "Alpha")]);
    assert!(both[0].2 > both[1].2 && both[1].2 > 0.0, "{both:?}");
    let one = hits(sb.webindex(&["query", "snapshot", "--limit", "2"]));
    let urls: Vec<_> = one.iter().map(|h| h.1.as_str()).collect();
    assert_eq!(urls, ["http://a.example/", "http://b.example/"]);
    let out = sb.webindex_run(&["query", "nothing"]);
    assert!(out.status.success() && out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no page has every term (nothing)"));
    let out = sb.webindex_run(&["query", "a"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no searchable terms"));
}

#[test]
fn sample_crawl_writes_loadable_jsonl() {
    let sb = Sandbox::new("crawl");
    let out = sb.webindex(&["sample-crawl", "--out", "c1", "--pages", "12", "--seed", "2"]);
    assert!(out.starts_with("wrote 12 pages to "), "{out}");
    sb.webindex(&["sample-crawl", "--out", "c2", "--pages", "12", "--seed", "2"]);
    for f in ["crawl.jsonl", "recrawl.jsonl"] {
        let a = std::fs::read(sb.path("c1").join(f)).unwrap();
        assert_eq!(a, std::fs::read(sb.path("c2").join(f)).unwrap(), "{f} is deterministic");
        for line in String::from_utf8(a).unwrap().lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            assert!(v["url"].is_string() && v["html"].is_string() && v["pagerank"].is_number(), "{line}");
        }
    }
    let crawl = std::fs::read_to_string(sb.path("c1/crawl.jsonl")).unwrap();
    assert_eq!(crawl.lines().count(), 12);
    let out = sb.percolator(&["load", "pages", "c1/crawl.jsonl", "--key", "url"]);
    assert!(out.starts_with("loaded 12 records into pages in "), "{out}");
    let first: serde_json::Value = serde_json::from_str(crawl.lines().next().unwrap()).unwrap();
    let url = first["url"].as_str().unwrap();
    assert_eq!(sb.percolator(&["get", "pages", url, "raw:html"]), format!("{}\n", first["html"].as_str().unwrap()));
    let out = sb.webindex_run(&["sample-crawl", "--out", "c3", "--pages", "0"]);
    assert_eq!(out.status.code(), Some(2), "a usage error");
    // The hub shape: another web from the same seed, as deterministic.
    for dir in ["h1", "h2"] {
        sb.webindex(&["sample-crawl", "--out", dir, "--pages", "12", "--seed", "2", "--shape", "hubs"]);
    }
    let hubs = std::fs::read_to_string(sb.path("h1/crawl.jsonl")).unwrap();
    assert_eq!(hubs, std::fs::read_to_string(sb.path("h2/crawl.jsonl")).unwrap());
    assert_eq!(hubs.lines().count(), 12);
    assert_ne!(hubs, crawl);
    // The docs shape: documentation sites, a third of the pages mirror copies.
    sb.webindex(&["sample-crawl", "--out", "d1", "--pages", "30", "--seed", "2", "--shape", "docs"]);
    let docs = std::fs::read_to_string(sb.path("d1/crawl.jsonl")).unwrap();
    let html: Vec<String> = docs
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["html"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(html.len(), 30);
    assert!(html[0].contains("<nav class=\"sidebar\""), "{}", html[0]);
    let distinct: std::collections::BTreeSet<&String> = html.iter().collect();
    assert_eq!(distinct.len(), 20, "10 of 30 pages are copies");
}
