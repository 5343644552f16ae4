//! Reading a file for `percolator load`: JSONL or CSV records become rows and cells. [`read`]
//! streams a file in bounded memory (a line, or a CSV record, at a time), handing each valid
//! record on as soon as it is read; every problem is reported as `FILE:LINE: what is wrong`. A
//! UTF-8 byte order mark at the start of the file is skipped. [`parse`] collects a whole
//! (small) input, for tests and tools.
//!
//! Mapping: the key field (`--key`) is the row; every other field is a column
//! `<family>:<field>` (or `<field>` as is if it contains `:`). JSON strings are stored as is,
//! numbers and booleans as their JSON text, arrays and objects as compact JSON, and `null`
//! deletes the cell. CSV values are stored as strings. Fields named in `--base64` hold bytes
//! (e.g. HTML in any encoding) as base64 text: they are stored decoded.

use std::collections::{BTreeSet, HashSet};
use std::fmt;
use std::io::{BufRead, BufReader, Read};
use std::ops::ControlFlow;
use std::path::Path;

use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

use crate::types::{CellValue, LoadRecord, MAX_REQUEST_BYTES, decode_base64};

/// At most this many problems are listed.
const MAX_ERRORS: usize = 20;

/// A load batch holds at most this much JSON (records), unless one record alone is larger.
pub const MAX_BATCH_BYTES: usize = 8 << 20;

/// The largest record (as JSON): one record must fit in one load request, with room for the
/// request's other fields. A larger one is a problem of the file, found before anything is
/// written, whichever route the load takes.
pub const MAX_RECORD_BYTES: usize = MAX_REQUEST_BYTES - (1 << 20);

/// The UTF-8 byte order mark some editors put at the start of a file.
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// The file format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// One JSON object per line.
    Jsonl,
    /// Comma-separated values with a header row.
    Csv,
}

impl Format {
    /// From the file's extension: `.jsonl`, `.ndjson`, `.json` → JSONL; `.csv` → CSV.
    pub fn from_path(path: &Path) -> Option<Format> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        match ext.as_str() {
            "jsonl" | "ndjson" | "json" => Some(Format::Jsonl),
            "csv" => Some(Format::Csv),
            _ => None,
        }
    }

    /// `jsonl` or `csv`.
    pub fn name(self) -> &'static str {
        match self {
            Format::Jsonl => "jsonl",
            Format::Csv => "csv",
        }
    }
}

/// How a file is read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// The format.
    pub format: Format,
    /// The field that becomes the row key.
    pub key: String,
    /// The column family of fields without one.
    pub family: String,
    /// Fields whose values are base64 text of the bytes to store.
    pub base64: BTreeSet<String>,
}

impl Options {
    /// A stable description (kept in the load's checkpoint: a resumed load must read the file
    /// the same way).
    pub fn describe(&self) -> String {
        let mut d = format!("format={} key={} family={}", self.format.name(), self.key, self.family);
        if !self.base64.is_empty() {
            d.push_str(" base64=");
            d.push_str(&self.base64.iter().map(String::as_str).collect::<Vec<_>>().join(","));
        }
        d
    }
}

/// A file's records, checked (from [`parse`]).
#[derive(Debug)]
pub struct Parsed {
    /// In file order.
    pub records: Vec<LoadRecord>,
    /// The size of each record as compact JSON (as a load batch carries it), in file order.
    pub sizes: Vec<usize>,
    /// Every column written, sorted.
    pub columns: Vec<String>,
}

/// What [`read`] found in a file without problems.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    /// Records read (all of the file's, unless the caller stopped early).
    pub records: u64,
    /// Every column those records write, sorted.
    pub columns: Vec<String>,
}

/// One valid record, as [`read`] hands it on.
#[derive(Debug)]
pub struct Read1 {
    /// The line it starts on (1-based).
    pub line: u64,
    /// The record.
    pub record: LoadRecord,
    /// Its size as compact JSON (as a load batch carries it).
    pub size: usize,
}

/// Hands valid records on, until the first problem: from then on only problems are collected.
struct Records<'f> {
    each: &'f mut dyn FnMut(Read1) -> ControlFlow<()>,
    count: u64,
    max_bytes: usize,
    stopped: bool,
}

impl Records<'_> {
    /// Accepts the record of line `line`, unless it is too large to send.
    fn push(&mut self, line: u64, record: LoadRecord, c: &mut Collector<'_>) {
        let size = json_size(&record);
        if size > self.max_bytes {
            c.add(line, format!("the record is {size} bytes of JSON, more than the limit of {} bytes", self.max_bytes));
            return;
        }
        if self.stopped || !c.problems.list.is_empty() {
            return;
        }
        self.count += 1;
        if (self.each)(Read1 { line, record, size }).is_break() {
            self.stopped = true;
        }
    }

    /// True once reading may stop: the caller asked to.
    fn done(&self) -> bool {
        self.stopped
    }
}

/// The length of `record` as compact JSON.
fn json_size(record: &LoadRecord) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut n = Count(0);
    // Strings and options only: serializing cannot fail.
    let _ = serde_json::to_writer(&mut n, record);
    n.0
}

/// Why a file cannot be loaded: its problems, each `FILE:LINE: what is wrong`.
#[derive(Debug)]
pub struct Problems {
    /// The first problems.
    pub list: Vec<String>,
    /// How many more there are.
    pub more: usize,
}

impl fmt::Display for Problems {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.list.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            f.write_str(p)?;
        }
        if self.more > 0 {
            write!(f, "\n... and {} more {}", self.more, if self.more == 1 { "problem" } else { "problems" })?;
        }
        Ok(())
    }
}

struct Collector<'a> {
    name: &'a str,
    problems: Problems,
}

impl Collector<'_> {
    fn add(&mut self, line: u64, message: impl fmt::Display) {
        if self.problems.list.len() < MAX_ERRORS {
            let at = if line > 0 { format!(":{line}") } else { String::new() };
            self.problems.list.push(format!("{}{at}: {message}", self.name));
        } else {
            self.problems.more += 1;
        }
    }
}

/// Maps field names to columns, checking each distinct one once.
struct Columns<'a> {
    family: &'a str,
    seen: BTreeSet<String>,
    bad: HashSet<String>,
    /// `--base64` fields, and those seen in the file.
    base64: &'a BTreeSet<String>,
    base64_seen: BTreeSet<String>,
}

impl Columns<'_> {
    fn column(&mut self, field: &str) -> Result<String, String> {
        if field.is_empty() {
            return Err("a field has an empty name".into());
        }
        let column = if field.contains(':') { field.to_owned() } else { format!("{}:{field}", self.family) };
        if self.seen.contains(&column) {
            return Ok(column);
        }
        if self.bad.contains(&column) {
            return Err(String::new());
        }
        match percolator_store::validate_column(&column) {
            Ok(()) => {
                self.seen.insert(column.clone());
                Ok(column)
            }
            Err(e) => {
                self.bad.insert(column.clone());
                Err(format!("field {field:?} cannot be a column: {e}"))
            }
        }
    }
}

/// Checks the family: a column family name, without `:`.
pub fn check_family(family: &str) -> Result<(), String> {
    if family.is_empty() || family.contains(':') {
        return Err(format!("--family {family:?} must be a non-empty name without ':'"));
    }
    percolator_store::validate_column(&format!("{family}:x")).map_err(|e| format!("--family {family:?}: {e}"))
}

/// Reads every record of `bytes` (the contents of the file `name`) for `table`, all at once
/// (see [`read`], which streams).
pub fn parse(name: &str, bytes: &[u8], table: &str, opts: &Options) -> Result<Parsed, Problems> {
    parse_limited(name, bytes, table, opts, MAX_RECORD_BYTES)
}

fn parse_limited(
    name: &str,
    bytes: &[u8],
    table: &str,
    opts: &Options,
    max_record_bytes: usize,
) -> Result<Parsed, Problems> {
    let (mut records, mut sizes) = (Vec::new(), Vec::new());
    let summary = read_limited(name, bytes, table, opts, max_record_bytes, &mut |r| {
        records.push(r.record);
        sizes.push(r.size);
        ControlFlow::Continue(())
    })?;
    Ok(Parsed { records, sizes, columns: summary.columns })
}

/// Reads the records of `input` (the contents of the file `name`) for `table`, in bounded
/// memory: a line (JSONL) or a record (CSV) at a time, whatever the file's size. Each valid
/// record goes to `each` as soon as it is read, in file order, until `each` answers
/// [`ControlFlow::Break`] (reading stops there) or a problem is found: from the first problem
/// on, `each` is not called again, and reading goes on only to list the file's problems (the
/// first 20, and how many more). The answer is the problems if there are any, else what was
/// read.
///
/// So `each` has seen only records before the first problem, but it has seen them before the
/// problem was known: a caller that must write nothing of an invalid file reads it twice, once
/// with an `each` that does nothing and then to write (what `percolator load` does).
///
/// A CSV record that opens a quoted field and never closes it swallows the rest of the file;
/// it is held back until the file ends (it is then reported where it opens), so `each` sees a
/// CSV record one record late.
pub fn read(
    name: &str,
    input: impl Read,
    table: &str,
    opts: &Options,
    each: &mut dyn FnMut(Read1) -> ControlFlow<()>,
) -> Result<Summary, Problems> {
    read_limited(name, input, table, opts, MAX_RECORD_BYTES, each)
}

fn read_limited(
    name: &str,
    input: impl Read,
    table: &str,
    opts: &Options,
    max_record_bytes: usize,
    each: &mut dyn FnMut(Read1) -> ControlFlow<()>,
) -> Result<Summary, Problems> {
    let mut c = Collector { name, problems: Problems { list: Vec::new(), more: 0 } };
    if let Err(e) = percolator_store::validate_table(table) {
        c.add(0, format!("table {table:?}: {e}"));
        return Err(c.problems);
    }
    if let Err(e) = check_family(&opts.family) {
        c.add(0, e);
        return Err(c.problems);
    }
    if opts.base64.contains(&opts.key) {
        c.add(0, format!("--base64 names the key field {:?} (row keys are text)", opts.key));
        return Err(c.problems);
    }
    let input = match without_bom(input) {
        Ok(i) => BufReader::with_capacity(1 << 16, i),
        Err(e) => {
            c.add(0, format!("cannot read: {e}"));
            return Err(c.problems);
        }
    };
    let mut columns = Columns {
        family: &opts.family,
        seen: BTreeSet::new(),
        bad: HashSet::new(),
        base64: &opts.base64,
        base64_seen: BTreeSet::new(),
    };
    let mut records = Records { each, count: 0, max_bytes: max_record_bytes, stopped: false };
    match opts.format {
        Format::Jsonl => jsonl(input, &opts.key, &mut columns, &mut records, &mut c),
        Format::Csv => csv(input, &opts.key, &mut columns, &mut records, &mut c),
    }
    if c.problems.list.is_empty() && !records.done() {
        // A misspelt --base64 field would store the real field's base64 text as the value.
        let missing: Vec<&str> =
            opts.base64.iter().filter(|f| !columns.base64_seen.contains(*f)).map(String::as_str).collect();
        if !missing.is_empty() {
            c.add(
                0,
                format!(
                    "--base64 names {} that no record has: {}",
                    crate::text::plural(missing.len(), "field", "fields"),
                    missing.join(", ")
                ),
            );
        }
    }
    if !c.problems.list.is_empty() {
        return Err(c.problems);
    }
    Ok(Summary { records: records.count, columns: columns.seen.into_iter().collect() })
}

/// `input` without a byte order mark at its start.
fn without_bom(mut input: impl Read) -> std::io::Result<impl Read> {
    let mut head = [0u8; BOM.len()];
    let mut n = 0;
    while n < head.len() {
        match input.read(&mut head[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let kept = if head[..n] == *BOM { Vec::new() } else { head[..n].to_vec() };
    Ok(std::io::Cursor::new(kept).chain(input))
}

fn check_row(row: &str) -> Result<(), String> {
    percolator_store::validate_row(row.as_bytes()).map_err(|e| e.to_string())
}

fn jsonl(
    mut input: impl BufRead,
    key: &str,
    columns: &mut Columns<'_>,
    records: &mut Records<'_>,
    c: &mut Collector<'_>,
) {
    let mut buf = Vec::new();
    let mut n = 0u64;
    while !records.done() {
        buf.clear();
        n += 1;
        match input.read_until(b'\n', &mut buf) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => {
                c.add(n, format!("cannot read: {e}"));
                break;
            }
        }
        let line = buf.strip_suffix(b"\n").unwrap_or(&buf);
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Ok(line) = std::str::from_utf8(line) else {
            c.add(n, "not valid UTF-8");
            continue;
        };
        let trimmed = line.trim_start();
        if trimmed.is_empty() {
            continue;
        }
        let found = match trimmed.as_bytes()[0] {
            b'[' => Some("an array"),
            b'"' => Some("a string"),
            b'-' | b'0'..=b'9' => Some("a number"),
            b't' | b'f' => Some("a boolean"),
            b'n' => Some("null"),
            _ => None,
        };
        if let Some(found) = found
            && serde_json::from_str::<serde::de::IgnoredAny>(line).is_ok()
        {
            c.add(n, format!("expected a JSON object, found {found}"));
            continue;
        }
        let fields = match serde_json::from_str::<Fields>(line) {
            Ok(f) => f.0,
            Err(e) => {
                let msg = e.to_string().replace(" at line 1 column ", " at column ");
                match e.classify() {
                    serde_json::error::Category::Data => c.add(n, msg),
                    _ => c.add(n, format!("expected a JSON object: {msg}")),
                }
                continue;
            }
        };
        let mut row = None;
        let mut cells = Vec::with_capacity(fields.len());
        let mut ok = true;
        for (field, raw) in &fields {
            if field == key {
                match key_value(raw) {
                    Ok(r) => row = Some(r),
                    Err(m) => {
                        c.add(n, format!("field {key:?} {m}"));
                        ok = false;
                    }
                }
                continue;
            }
            let column = match columns.column(field) {
                Ok(col) => col,
                Err(m) => {
                    if !m.is_empty() {
                        c.add(n, m);
                    }
                    ok = false;
                    continue;
                }
            };
            let value = if columns.base64.contains(field) {
                columns.base64_seen.insert(field.clone());
                base64_value(raw)
            } else {
                cell_value(raw).map_err(|e| e.to_string())
            };
            match value {
                Ok(v) => cells.push((column, v)),
                Err(e) => {
                    c.add(n, format!("field {field:?}: {e}"));
                    ok = false;
                }
            }
        }
        match row {
            None if ok => c.add(n, format!("field {key:?} is missing")),
            Some(row) if ok => match check_row(&row) {
                Ok(()) => records.push(n, LoadRecord { row, cells }, c),
                Err(e) => c.add(n, format!("field {key:?}: {e}")),
            },
            _ => {}
        }
    }
}

/// The key field's value as a row: a non-empty string, or an integer's text.
fn key_value(raw: &RawValue) -> Result<String, String> {
    let t = raw.get();
    match t.as_bytes().first() {
        Some(b'"') => {
            let s: String = serde_json::from_str(t).map_err(|e| e.to_string())?;
            if s.is_empty() { Err("is an empty string".into()) } else { Ok(s) }
        }
        Some(b'-' | b'0'..=b'9') if t.bytes().skip(1).all(|b| b.is_ascii_digit()) && t != "-" => Ok(t.to_owned()),
        Some(b'-' | b'0'..=b'9') => Err(format!("must be a non-empty string or an integer, not the number {t}")),
        Some(b'n') => Err("must be a non-empty string or an integer, not null".into()),
        Some(b't' | b'f') => Err(format!("must be a non-empty string or an integer, not {t}")),
        Some(b'[') => Err("must be a non-empty string or an integer, not an array".into()),
        _ => Err("must be a non-empty string or an integer, not an object".into()),
    }
}

/// A field's value as a cell value (`None` deletes).
fn cell_value(raw: &RawValue) -> Result<Option<CellValue>, serde_json::Error> {
    let t = raw.get();
    match t.as_bytes().first() {
        Some(b'"') => serde_json::from_str::<String>(t).map(|s| Some(s.into())),
        Some(b'n') => Ok(None),
        Some(b'[' | b'{') => serde_json::from_str::<serde_json::Value>(t).map(|v| Some(v.to_string().into())),
        _ => Ok(Some(t.to_owned().into())),
    }
}

/// A `--base64` field's value: a string of valid base64 (kept encoded: the host decodes it),
/// or `null` (deletes).
fn base64_value(raw: &RawValue) -> Result<Option<CellValue>, String> {
    let t = raw.get();
    match t.as_bytes().first() {
        Some(b'"') => {
            let text: String = serde_json::from_str(t).map_err(|e| e.to_string())?;
            checked_base64(text).map(Some)
        }
        Some(b'n') => Ok(None),
        _ => Err(format!("a --base64 field must be a string or null, not {}", json_kind(t))),
    }
}

/// `text` as a bytes value, if it is valid base64.
fn checked_base64(text: String) -> Result<CellValue, String> {
    decode_base64(&text)?;
    Ok(CellValue::Bytes { base64: text })
}

fn json_kind(t: &str) -> &'static str {
    match t.as_bytes().first() {
        Some(b'[') => "an array",
        Some(b'{') => "an object",
        Some(b't' | b'f') => "a boolean",
        _ => "a number",
    }
}

/// A JSON object's fields in order, each value kept as its JSON text; a repeated field is an
/// error.
struct Fields(Vec<(String, Box<RawValue>)>);

impl<'de> serde::Deserialize<'de> for Fields {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Fields, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Fields;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Fields, A::Error> {
                let mut out: Vec<(String, Box<RawValue>)> = Vec::new();
                while let Some(k) = map.next_key::<String>()? {
                    if out.iter().any(|(f, _)| *f == k) {
                        return Err(serde::de::Error::custom(format!("field {k:?} appears twice")));
                    }
                    let v: Box<RawValue> = map.next_value()?;
                    out.push((k, v));
                }
                Ok(Fields(out))
            }
        }
        d.deserialize_map(V)
    }
}

/// A quoted CSV field that is never closed: it would swallow the rest of the file.
#[derive(Debug, PartialEq, Eq)]
struct Unclosed {
    /// The line of the opening quote (1-based).
    line: u64,
    /// Where the record holding it starts (a byte offset).
    record_start: usize,
}

/// Finds a quoted field that is never closed, reading as the `csv` crate does: a quote opens a
/// quoted field only at the start of a field; in it, `""` is a quote and a lone `"` closes it.
/// Fed the file's bytes as they are read ([`QuoteScan::feed`]).
#[derive(Clone, Copy)]
struct QuoteScan {
    state: QuoteState,
    /// The line at the scan's position (1-based).
    line: u64,
    /// Bytes scanned.
    offset: usize,
    /// Where the current record starts (a byte offset).
    record_start: usize,
    /// The line and record start of the last quote that opened a field.
    opened: (u64, usize),
}

#[derive(Clone, Copy)]
enum QuoteState {
    FieldStart,
    Unquoted,
    Quoted,
    /// A quote in a quoted field: it closes it, unless another quote follows.
    QuoteInQuoted,
}

impl QuoteScan {
    fn new() -> QuoteScan {
        QuoteScan { state: QuoteState::FieldStart, line: 1, offset: 0, record_start: 0, opened: (0, 0) }
    }

    fn feed(&mut self, bytes: &[u8]) {
        use QuoteState::*;
        for (i, &b) in bytes.iter().enumerate() {
            self.state = match (self.state, b) {
                (Quoted, b'"') => QuoteInQuoted,
                (Quoted, _) => Quoted,
                (QuoteInQuoted, b'"') => Quoted,
                (FieldStart, b'"') => {
                    self.opened = (self.line, self.record_start);
                    Quoted
                }
                (_, b',') => FieldStart,
                (_, b'\n' | b'\r') => {
                    self.record_start = self.offset + i + 1;
                    FieldStart
                }
                _ => Unquoted,
            };
            if b == b'\n' {
                self.line += 1;
            }
        }
        self.offset += bytes.len();
    }

    /// At the end of the file: the quoted field left open, if one is.
    fn unclosed(&self) -> Option<Unclosed> {
        matches!(self.state, QuoteState::Quoted)
            .then_some(Unclosed { line: self.opened.0, record_start: self.opened.1 })
    }
}

/// [`QuoteScan`] over a whole input.
#[cfg(test)]
fn unclosed_quote(bytes: &[u8]) -> Option<Unclosed> {
    let mut scan = QuoteScan::new();
    scan.feed(bytes);
    scan.unclosed()
}

/// A reader that feeds what it reads to a [`QuoteScan`].
struct Scanned<R> {
    inner: R,
    scan: std::rc::Rc<std::cell::Cell<QuoteScan>>,
}

impl<R: Read> Read for Scanned<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        let mut scan = self.scan.get();
        scan.feed(&buf[..n]);
        self.scan.set(scan);
        Ok(n)
    }
}

/// Takes one item of the CSV reader (with the byte offset where it starts).
type TakeItem<'a> = dyn FnMut((usize, CsvItem), &mut Records<'_>, &mut Collector<'_>) + 'a;

/// One item of the CSV reader, held back by one (see [`csv`]): where it starts, and what it is.
enum CsvItem {
    Record(u64, LoadRecord),
    Problems(u64, Vec<String>),
}

fn csv(input: impl Read, key: &str, columns: &mut Columns<'_>, records: &mut Records<'_>, c: &mut Collector<'_>) {
    let scan = std::rc::Rc::new(std::cell::Cell::new(QuoteScan::new()));
    let reader = Scanned { inner: input, scan: scan.clone() };
    // An unclosed quote makes the rest of the file one field: reported as such (not as a record
    // with too few fields), after the problems of the records before it. Only at the end of
    // the file is it known, so each item waits for the next one before it is taken, and the
    // one starting at the unclosed quote's record is dropped.
    let mut held: Option<(usize, CsvItem)> = None;
    let mut header = Vec::new();
    let take = |item: (usize, CsvItem), records: &mut Records<'_>, c: &mut Collector<'_>| match item.1 {
        CsvItem::Record(line, r) => records.push(line, r, c),
        CsvItem::Problems(line, list) => {
            for m in list {
                c.add(line, m);
            }
        }
    };
    let mut hold = |item, records: &mut Records<'_>, c: &mut Collector<'_>| {
        if let Some(h) = held.replace(item) {
            take(h, records, c);
        }
    };
    csv_records(reader, key, columns, records, c, &mut hold, &mut header);
    let unclosed = scan.get().unclosed();
    match (&unclosed, held) {
        // The header itself is unclosed: nothing of the file counts.
        (Some(u), _) if u.record_start == 0 => {
            header.clear();
        }
        (Some(u), Some(h)) if h.0 >= u.record_start => {}
        (_, Some(h)) => take(h, records, c),
        (_, None) => {}
    }
    for (line, m) in header {
        c.add(line, m);
    }
    if let Some(u) = unclosed {
        c.add(u.line, "a quoted field starts here and is never closed (a '\"' is missing)");
    }
}

/// Reads the CSV records of `input`, handing each (with the byte offset where it starts) to
/// `item`; the header's problems go to `header` (reported unless the header is unclosed).
fn csv_records(
    input: impl Read,
    key: &str,
    columns: &mut Columns<'_>,
    records: &mut Records<'_>,
    c: &mut Collector<'_>,
    item: &mut TakeItem<'_>,
    header: &mut Vec<(u64, String)>,
) {
    let mut reader = ::csv::ReaderBuilder::new().has_headers(true).from_reader(input);
    let headers = match reader.headers() {
        Ok(h) => h.clone(),
        Err(e) => {
            header.push((csv_line(&e), csv_message(&e)));
            return;
        }
    };
    if headers.is_empty() {
        header.push((1, "the header row is empty (it names the fields)".into()));
        return;
    }
    let mut key_index = None;
    let mut mapped: Vec<Option<String>> = Vec::with_capacity(headers.len());
    let base64: Vec<bool> = headers.iter().map(|f| columns.base64.contains(f)).collect();
    for f in headers.iter().filter(|f| columns.base64.contains(*f)) {
        columns.base64_seen.insert(f.to_owned());
    }
    let mut ok = true;
    for (i, field) in headers.iter().enumerate() {
        if headers.iter().take(i).any(|f| f == field) {
            header.push((1, format!("field {field:?} appears twice in the header")));
            ok = false;
        }
        if field == key {
            key_index = Some(i);
            mapped.push(None);
            continue;
        }
        match columns.column(field) {
            Ok(col) => mapped.push(Some(col)),
            Err(m) => {
                header.push((1, m));
                ok = false;
                mapped.push(None);
            }
        }
    }
    let Some(key_index) = key_index else {
        let names: Vec<&str> = headers.iter().collect();
        header.push((1, format!("field {key:?} is missing from the header (it has {})", names.join(", "))));
        return;
    };
    if !ok {
        return;
    }
    let mut rec = ::csv::StringRecord::new();
    while !records.done() {
        let at = reader.position().byte() as usize;
        let problem = |line: u64, m: String| (at, CsvItem::Problems(line, vec![m]));
        match reader.read_record(&mut rec) {
            Ok(false) => break,
            Ok(true) => {}
            Err(e) => {
                item(problem(csv_line(&e), csv_message(&e)), records, c);
                continue;
            }
        }
        let line = rec.position().map(|p| p.line()).unwrap_or(0);
        let row = &rec[key_index];
        if row.is_empty() {
            item(problem(line, format!("field {key:?} is empty")), records, c);
            continue;
        }
        if let Err(e) = check_row(row) {
            item(problem(line, format!("field {key:?}: {e}")), records, c);
            continue;
        }
        let mut cells = Vec::with_capacity(mapped.len());
        let mut bad = None;
        for ((value, column), (field, base64)) in rec.iter().zip(&mapped).zip(headers.iter().zip(&base64)) {
            let Some(column) = column else { continue };
            let value = if *base64 {
                match checked_base64(value.to_owned()) {
                    Ok(v) => v,
                    Err(e) => {
                        bad.get_or_insert_with(Vec::new).push(format!("field {field:?}: {e}"));
                        continue;
                    }
                }
            } else {
                value.to_owned().into()
            };
            cells.push((column.clone(), Some(value)));
        }
        match bad {
            None => item((at, CsvItem::Record(line, LoadRecord { row: row.to_owned(), cells })), records, c),
            Some(problems) => item((at, CsvItem::Problems(line, problems)), records, c),
        }
    }
}

fn csv_line(e: &::csv::Error) -> u64 {
    e.position().map(|p| p.line()).unwrap_or(0)
}

fn csv_message(e: &::csv::Error) -> String {
    match e.kind() {
        ::csv::ErrorKind::UnequalLengths { expected_len, len, .. } => {
            let fields = if *len == 1 { "field" } else { "fields" };
            format!("the record has {len} {fields} but the header has {expected_len}")
        }
        ::csv::ErrorKind::Utf8 { err, .. } => format!("field {} is not valid UTF-8", err.field() + 1),
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(format: Format, key: &str) -> Options {
        Options { format, key: key.into(), family: "raw".into(), base64: BTreeSet::new() }
    }

    #[test]
    fn jsonl_fields_become_columns() {
        let src = br#"{"url": "a", "html": "<p>x</p>", "pagerank": 0.50, "ok": true, "tags": [1, 2], "x:y": null}

{"url": 7, "meta": {"k": "v"}}
"#;
        let p = parse("f.jsonl", src, "pages", &opts(Format::Jsonl, "url")).unwrap();
        assert_eq!(p.records.len(), 2);
        assert_eq!(p.records[0].row, "a");
        assert_eq!(
            p.records[0].cells,
            vec![
                ("raw:html".into(), Some("<p>x</p>".into())),
                ("raw:pagerank".into(), Some("0.50".into())),
                ("raw:ok".into(), Some("true".into())),
                ("raw:tags".into(), Some("[1,2]".into())),
                ("x:y".into(), None),
            ]
        );
        assert_eq!(p.records[1].row, "7");
        assert_eq!(p.records[1].cells, vec![("raw:meta".into(), Some(r#"{"k":"v"}"#.into()))]);
        assert_eq!(p.columns, ["raw:html", "raw:meta", "raw:ok", "raw:pagerank", "raw:tags", "x:y"]);
    }

    #[test]
    fn base64_fields_are_checked_and_kept_encoded() {
        let mut o = opts(Format::Jsonl, "url");
        o.base64 = ["html".to_owned()].into();
        assert_eq!(o.describe(), "format=jsonl key=url family=raw base64=html");
        // Padded, unpadded, empty, null.
        let src = br#"{"url": "a", "html": "Y2Fm6Q==", "title": "caf"}
{"url": "b", "html": "Y2Fm6Q"}
{"url": "c", "html": ""}
{"url": "d", "html": null}
"#;
        let p = parse("f.jsonl", src, "pages", &o).unwrap();
        let bytes = |i: usize| p.records[i].cells[0].1.as_ref().map(|v| v.to_bytes().unwrap().into_owned());
        assert_eq!(bytes(0).as_deref(), Some(&b"caf\xe9"[..]));
        assert_eq!(p.records[0].cells[1], ("raw:title".into(), Some("caf".into())));
        assert_eq!(bytes(1).as_deref(), Some(&b"caf\xe9"[..]));
        assert_eq!(bytes(2).as_deref(), Some(&b""[..]));
        assert_eq!(bytes(3), None);

        let bad = b"{\"url\": \"a\", \"html\": \"caf*!\"}\n{\"url\": \"b\", \"html\": 12}\n";
        let e = parse("f.jsonl", bad, "pages", &o).unwrap_err().to_string();
        let lines: Vec<&str> = e.lines().collect();
        assert!(lines[0].starts_with("f.jsonl:1: field \"html\": not base64: "), "{e}");
        assert_eq!(lines[1], "f.jsonl:2: field \"html\": a --base64 field must be a string or null, not a number");

        // A field no record has (a typo), and the key field.
        o.base64 = ["htm".to_owned()].into();
        let e = parse("f.jsonl", src, "pages", &o).unwrap_err().to_string();
        assert_eq!(e.lines().next(), Some("f.jsonl: --base64 names 1 field that no record has: htm"));
        o.base64 = ["url".to_owned()].into();
        let e = parse("f.jsonl", src, "pages", &o).unwrap_err().to_string();
        assert!(e.contains("--base64 names the key field \"url\""), "{e}");

        // CSV.
        let mut o = opts(Format::Csv, "url");
        o.base64 = ["html".to_owned()].into();
        let p = parse("f.csv", b"url,html\na,Y2Fm6Q==\nb,\n", "pages", &o).unwrap();
        assert_eq!(p.records[0].cells[0].1.as_ref().unwrap().to_bytes().unwrap().as_ref(), b"caf\xe9");
        let e = parse("f.csv", b"url,html\na,%%%\n", "pages", &o).unwrap_err().to_string();
        assert!(e.starts_with("f.csv:2: field \"html\": not base64: "), "{e}");
    }

    #[test]
    fn jsonl_problems_are_located() {
        let src = b"{\"row\": \"a\"}\n{\"row\": \n[1]\n{\"x\": 1}\n{\"row\": null}\n{\"row\": \"b\", \"row\": \"c\"}\n{\"row\": 1.5}\n";
        let e = parse("f.jsonl", src, "t", &opts(Format::Jsonl, "row")).unwrap_err().to_string();
        let lines: Vec<&str> = e.lines().collect();
        assert!(lines[0].starts_with("f.jsonl:2: expected a JSON object: EOF while parsing"), "{e}");
        assert_eq!(lines[1], "f.jsonl:3: expected a JSON object, found an array");
        assert_eq!(lines[2], "f.jsonl:4: field \"row\" is missing");
        assert_eq!(lines[3], "f.jsonl:5: field \"row\" must be a non-empty string or an integer, not null");
        assert!(lines[4].starts_with("f.jsonl:6: field \"row\" appears twice"), "{e}");
        assert_eq!(lines[5], "f.jsonl:7: field \"row\" must be a non-empty string or an integer, not the number 1.5");
    }

    #[test]
    fn bad_table_and_column_names_are_refused() {
        let e = parse("f.jsonl", b"{\"row\": \"a\"}", "", &opts(Format::Jsonl, "row")).unwrap_err().to_string();
        assert!(e.starts_with("f.jsonl: table \"\""), "{e}");
        let e = parse("f.jsonl", b"{\"row\": \"a\", \"__ack:x\": 1}", "t", &opts(Format::Jsonl, "row"))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("f.jsonl:1: field \"__ack:x\" cannot be a column"), "{e}");
    }

    #[test]
    fn a_byte_order_mark_is_skipped() {
        let p = parse("f.jsonl", b"\xEF\xBB\xBF{\"row\": \"a\"}\n{\"row\": \"b\"}\n", "t", &opts(Format::Jsonl, "row"))
            .unwrap();
        assert_eq!(p.records.iter().map(|r| r.row.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        let p = parse("f.csv", b"\xEF\xBB\xBFid,x\n1,2\n", "t", &opts(Format::Csv, "id")).unwrap();
        assert_eq!(p.records[0], LoadRecord { row: "1".into(), cells: vec![("raw:x".into(), Some("2".into()))] });
    }

    #[test]
    fn records_too_large_to_send_are_located() {
        let src = b"{\"row\": \"a\", \"x\": \"short\"}\n{\"row\": \"b\", \"x\": \"much longer\"}\n";
        let p = parse_limited("f.jsonl", src, "t", &opts(Format::Jsonl, "row"), 45).unwrap();
        assert_eq!(p.sizes, [json_size(&p.records[0]), json_size(&p.records[1])]);
        assert_eq!(p.sizes[0], serde_json::to_vec(&p.records[0]).unwrap().len());
        let e = parse_limited("f.jsonl", src, "t", &opts(Format::Jsonl, "row"), 44).unwrap_err().to_string();
        assert_eq!(e, "f.jsonl:2: the record is 45 bytes of JSON, more than the limit of 44 bytes");
        let e = parse_limited("f.csv", b"id,x\n1,2\n2,3333\n", "t", &opts(Format::Csv, "id"), 37).unwrap_err();
        assert_eq!(e.to_string(), "f.csv:3: the record is 38 bytes of JSON, more than the limit of 37 bytes");
    }

    #[test]
    fn an_unclosed_csv_quote_is_reported_where_it_opens() {
        assert_eq!(unclosed_quote(b"a,b\n1,\"x\"\"y\"\n\"2\",z\n"), None);
        assert_eq!(unclosed_quote(b"a,b\n1,x\"y\n"), None, "a quote inside a field is text");
        assert_eq!(unclosed_quote(b"a,b\r\n1,2\r\n\"c,4\r\n5,6\r\n"), Some(Unclosed { line: 3, record_start: 10 }));
        let src = b"url,n\na,1\nb\n\"c,4\nd,5\n";
        let e = parse("f.csv", src, "t", &opts(Format::Csv, "url")).unwrap_err().to_string();
        assert_eq!(
            e,
            "f.csv:3: the record has 1 field but the header has 2\n\
             f.csv:4: a quoted field starts here and is never closed (a '\"' is missing)"
        );
        // In a later field of a record that spans lines; in the header.
        let e = parse("f.csv", b"url,n\na,\"1\n2\"\nb,\"3\nc,4\n", "t", &opts(Format::Csv, "url")).unwrap_err();
        assert_eq!(e.to_string(), "f.csv:4: a quoted field starts here and is never closed (a '\"' is missing)");
        let e = parse("f.csv", b"\"url,n\na,1\n", "t", &opts(Format::Csv, "url")).unwrap_err();
        assert_eq!(e.to_string(), "f.csv:1: a quoted field starts here and is never closed (a '\"' is missing)");
        // An empty file still says its header is missing.
        let e = parse("f.csv", b"", "t", &opts(Format::Csv, "url")).unwrap_err();
        assert_eq!(e.to_string(), "f.csv:1: the header row is empty (it names the fields)");
    }

    /// A JSONL file of `records` lines, made as it is read (never whole in memory), that
    /// counts the bytes handed out.
    struct Generated {
        records: u64,
        next: u64,
        pending: Vec<u8>,
        handed_out: std::rc::Rc<std::cell::Cell<u64>>,
    }

    impl Read for Generated {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            if self.pending.is_empty() && self.next < self.records {
                self.pending =
                    format!("{{\"row\": \"r{:08}\", \"text\": \"{}\"}}\n", self.next, "x".repeat(1000)).into_bytes();
                self.next += 1;
            }
            let n = buf.len().min(self.pending.len());
            buf[..n].copy_from_slice(&self.pending[..n]);
            self.pending.drain(..n);
            self.handed_out.set(self.handed_out.get() + n as u64);
            Ok(n)
        }
    }

    #[test]
    fn records_are_handed_on_as_they_are_read() {
        // 20 MB of records of about 1 KB: each must come out before much more of the file is read
        // than its own line (the reader's 64 KiB buffer), whatever the file's size.
        let line_len = format!("{{\"row\": \"r{:08}\", \"text\": \"{}\"}}\n", 0, "x".repeat(1000)).len() as u64;
        let handed_out = std::rc::Rc::new(std::cell::Cell::new(0));
        let records = 20_000;
        let input = Generated { records, next: 0, pending: Vec::new(), handed_out: handed_out.clone() };
        let mut seen = 0u64;
        let mut ahead = 0u64;
        let summary = read("big.jsonl", input, "t", &opts(Format::Jsonl, "row"), &mut |r| {
            seen += 1;
            assert_eq!(r.line, seen);
            assert_eq!(r.record.row, format!("r{:08}", seen - 1));
            ahead = ahead.max(handed_out.get() - seen * line_len);
            ControlFlow::Continue(())
        })
        .unwrap();
        assert_eq!(summary, Summary { records, columns: vec!["raw:text".into()] });
        assert!(ahead <= 2 * (1 << 16), "read {ahead} bytes ahead of the record handed on");
        assert_eq!(handed_out.get(), records * line_len);

        // Stopping early stops reading.
        handed_out.set(0);
        let input = Generated { records, next: 0, pending: Vec::new(), handed_out: handed_out.clone() };
        let mut n = 0;
        let summary = read("big.jsonl", input, "t", &opts(Format::Jsonl, "row"), &mut |_| {
            n += 1;
            if n == 10 { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }
        })
        .unwrap();
        assert_eq!(summary.records, 10);
        assert!(handed_out.get() < 4 * (1 << 16), "{}", handed_out.get());
    }

    #[test]
    fn records_after_the_first_problem_are_not_handed_on() {
        let src = b"{\"row\": \"a\"}\n{\"row\": 1.5}\n{\"row\": \"c\"}\n";
        let mut rows = Vec::new();
        let e = read("f.jsonl", &src[..], "t", &opts(Format::Jsonl, "row"), &mut |r| {
            rows.push(r.record.row);
            ControlFlow::Continue(())
        })
        .unwrap_err();
        assert_eq!(rows, ["a"]);
        assert_eq!(
            e.to_string(),
            "f.jsonl:2: field \"row\" must be a non-empty string or an integer, not the number 1.5"
        );
        // CSV: a record is handed on one record late, and the one an unclosed quote opens never.
        let mut rows = Vec::new();
        let e = read("f.csv", &b"id,x\n1,a\n2,b\n3,\"c\n4,d\n"[..], "t", &opts(Format::Csv, "id"), &mut |r| {
            rows.push(r.record.row);
            ControlFlow::Continue(())
        })
        .unwrap_err();
        assert_eq!(rows, ["1", "2"]);
        assert_eq!(e.to_string(), "f.csv:4: a quoted field starts here and is never closed (a '\"' is missing)");
    }

    #[test]
    fn problems_beyond_the_list_are_counted_in_words() {
        let p = |more| Problems { list: vec!["f:1: x".into()], more }.to_string();
        assert_eq!(p(1), "f:1: x\n... and 1 more problem");
        assert_eq!(p(2), "f:1: x\n... and 2 more problems");
    }

    #[test]
    fn csv_rows_and_problems() {
        let src = b"id,name,n\n1,one,1\n2,two\n,three,3\n4,\"fo,ur\",4\n";
        let e = parse("f.csv", src, "t", &opts(Format::Csv, "id")).unwrap_err().to_string();
        assert_eq!(e, "f.csv:3: the record has 2 fields but the header has 3\nf.csv:4: field \"id\" is empty");
        let p = parse("f.csv", b"id,name\n1,one\n4,\"fo,ur\"\n", "t", &opts(Format::Csv, "id")).unwrap();
        assert_eq!(
            p.records[1],
            LoadRecord { row: "4".into(), cells: vec![("raw:name".into(), Some("fo,ur".into()))] }
        );
        let e = parse("f.csv", b"a,b\n1,2\n", "t", &opts(Format::Csv, "id")).unwrap_err().to_string();
        assert_eq!(e, "f.csv:1: field \"id\" is missing from the header (it has a, b)");
    }
}
