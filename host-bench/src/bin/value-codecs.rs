//! Which compression for large cell values: LZ4 (`lz4_flex`) against deflate (`miniz_oxide`,
//! levels 1 and 6, and the store's own stored form, libdeflate level 1 with its 5-byte header,
//! `store_libdeflate1`) on the web index's values — every cell of `webindex::batch::compute` over a
//! generated crawl (the pages' HTML, their text and links, term lists, cluster rows), which is
//! what the pipeline's tables hold at the fixed point. For each codec: the ratio over the
//! values at or above the threshold (and over all bytes), and compression and decompression
//! speed (MB/s of uncompressed bytes, one thread, best of 3 passes).
//!
//! ```text
//! cargo run --release -p percolator-host-bench --bin value-codecs -- --pages 10000
//! ```
//!
//! Options: `--pages N` (default 10000), `--seed S` (1), `--threshold BYTES` (256). Prints
//! `name value` lines; `#` lines are comments.

use std::collections::BTreeMap;
use std::time::Instant;

use webindex::crawl::{self, Shape};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// A codec under test: compress, decompress (given the original length).
struct Codec {
    name: &'static str,
    compress: fn(&[u8]) -> Vec<u8>,
    decompress: fn(&[u8], usize) -> Vec<u8>,
}

const CODECS: &[Codec] = &[
    Codec {
        name: "lz4",
        compress: |v| lz4_flex::block::compress(v),
        decompress: |c, n| lz4_flex::block::decompress(c, n).expect("lz4 round trip"),
    },
    Codec {
        name: "deflate1",
        compress: |v| miniz_oxide::deflate::compress_to_vec(v, 1),
        decompress: |c, _| miniz_oxide::inflate::decompress_to_vec(c).expect("deflate round trip"),
    },
    Codec {
        name: "store_libdeflate1",
        compress: percolator_store::backends::encode_value,
        decompress: |c, _| percolator_store::backends::decode_value(c).expect("stored form round trip"),
    },
    Codec {
        name: "deflate6",
        compress: |v| miniz_oxide::deflate::compress_to_vec(v, 6),
        decompress: |c, _| miniz_oxide::inflate::decompress_to_vec(c).expect("deflate round trip"),
    },
];

fn main() {
    if let Err(e) = run() {
        eprintln!("value-codecs: {e}");
        std::process::exit(1);
    }
}

fn run() -> Res<()> {
    let (mut pages, mut seed, mut threshold) = (10_000usize, 1u64, 256usize);
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--pages" => pages = value()?.parse().map_err(|e| format!("--pages: {e}"))?,
            "--seed" => seed = value()?.parse().map_err(|e| format!("--seed: {e}"))?,
            "--threshold" => threshold = value()?.parse().map_err(|e| format!("--threshold: {e}"))?,
            other => return Err(format!("unknown argument {other:?} (expected --pages, --seed, --threshold)").into()),
        }
    }
    let crawl = crawl::generate_shaped(seed, pages, Shape::Hubs);
    let tables = webindex::batch::compute(&crawl.inputs())?;
    // Values by column (`table/column`), all of them; the large ones are compressed.
    let mut by_column: BTreeMap<String, Vec<&[u8]>> = BTreeMap::new();
    for (table, cells) in &tables {
        for ((_, column), value) in cells {
            by_column.entry(format!("{table}/{column}")).or_default().push(value);
        }
    }
    let all: usize = by_column.values().flatten().map(|v| v.len()).sum();
    let large: Vec<&[u8]> = by_column.values().flatten().filter(|v| v.len() >= threshold).copied().collect();
    let large_bytes: usize = large.iter().map(|v| v.len()).sum();
    println!("# {pages}-page hub crawl, seed {seed}: the batch computation's cells; threshold {threshold} bytes");
    println!("value_codecs_cells {}", by_column.values().map(Vec::len).sum::<usize>());
    println!("value_codecs_value_bytes {all}");
    println!("value_codecs_large_values {}", large.len());
    println!("value_codecs_large_value_bytes {large_bytes}");
    for (column, values) in &by_column {
        let n: usize = values.iter().map(|v| v.len()).sum();
        let big = values.iter().filter(|v| v.len() >= threshold).count();
        println!("# {column}: {} values, {n} bytes, {big} at or above the threshold", values.len());
    }
    for codec in CODECS {
        let mut best_c = f64::MAX;
        let mut best_d = f64::MAX;
        let mut packed = 0;
        for _ in 0..3 {
            let t = Instant::now();
            let out: Vec<Vec<u8>> = large.iter().map(|v| (codec.compress)(v)).collect();
            best_c = best_c.min(t.elapsed().as_secs_f64());
            packed = out.iter().map(Vec::len).sum::<usize>();
            let t = Instant::now();
            for (c, v) in out.iter().zip(&large) {
                let back = (codec.decompress)(c, v.len());
                assert_eq!(back.len(), v.len());
            }
            best_d = best_d.min(t.elapsed().as_secs_f64());
        }
        let name = codec.name;
        println!("value_codecs_{name}_large_ratio {:.2}", large_bytes as f64 / packed as f64);
        println!("value_codecs_{name}_all_ratio {:.2}", all as f64 / (all - large_bytes + packed) as f64);
        println!("value_codecs_{name}_compress_mb_per_s {:.0}", large_bytes as f64 / best_c / 1e6);
        println!("value_codecs_{name}_decompress_mb_per_s {:.0}", large_bytes as f64 / best_d / 1e6);
    }
    Ok(())
}
