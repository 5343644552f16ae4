//! The PostgreSQL sink: each batch upserted into one table in one transaction, every cell
//! versioned by its commit timestamp, so that a batch applied twice, or an older change
//! applied after a newer one, changes nothing.
//!
//! The target table is `(row TEXT PRIMARY KEY, <col> TEXT, <col>_bytes BYTEA, <col>_version
//! BIGINT, ...)`, one triple per store column (`doc:title` → `doc_title`,
//! [`crate::config::postgres_column`]); it is created if missing, and missing columns are
//! added. A value that is UTF-8 text without NUL bytes is in `<col>` (and `<col>_bytes` is
//! NULL); any other value is in `<col>_bytes` (and `<col>` is NULL). A deletion sets both to
//! NULL and keeps the version: a tombstone, so that an older upsert arriving late is still
//! refused. A row key that is not UTF-8 is written as `\x` and its bytes in hex (PostgreSQL's
//! bytea text form). A batch is one statement per store column in it, the column's changes
//! passed as arrays (one round trip, not one per change):
//!
//! ```sql
//! INSERT INTO t AS t (row, c, c_bytes, c_version)
//! SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[], $4::bigint[])
//! ON CONFLICT (row) DO UPDATE SET c = excluded.c, c_bytes = excluded.c_bytes, c_version = excluded.c_version
//! WHERE t.c_version IS NULL OR excluded.c_version > t.c_version
//! ```
//!
//! One statement may not touch a row twice, so a cell changed more than once in a batch is
//! passed once, at its newest change (the changes come in commit-timestamp order): what the
//! versioned upserts of each change in turn would leave. The batch is acknowledged when its
//! transaction has committed.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::Duration;

use postgres::{Client, NoTls, Statement};

use super::{Batch, Deliver, Failure};

/// How long connecting may take before the attempt counts as failed (and is retried).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The session options unless the URL sets its own: a statement may take 60 s.
const STATEMENT_TIMEOUT: &str = "-c statement_timeout=60000";

/// Upserts into a PostgreSQL table.
pub struct PostgresSink {
    url: String,
    target: String,
    /// The PostgreSQL column of each store column, in the sink's order.
    columns: Vec<String>,
    /// The connection and the prepared upsert of each column; dropped on an error, so the
    /// next attempt reconnects.
    conn: Option<(Client, Vec<Statement>)>,
}

/// `name` as a quoted identifier.
fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The row key as PostgreSQL text: itself if UTF-8, else `\x` and hex.
pub fn row_text(row: &[u8]) -> String {
    match std::str::from_utf8(row) {
        Ok(s) => s.to_owned(),
        Err(_) => {
            let mut out = String::from("\\x");
            for b in row {
                let _ = write!(out, "{b:02x}");
            }
            out
        }
    }
}

/// The SQL that creates the target table and adds its missing columns.
pub fn create_sql(target: &str, columns: &[String]) -> Vec<String> {
    let t = ident(target);
    let mut out = vec![format!("CREATE TABLE IF NOT EXISTS {t} (\"row\" TEXT PRIMARY KEY)")];
    for c in columns {
        out.push(format!(
            "ALTER TABLE {t} ADD COLUMN IF NOT EXISTS {} TEXT, ADD COLUMN IF NOT EXISTS {} BYTEA, \
             ADD COLUMN IF NOT EXISTS {} BIGINT",
            ident(c),
            ident(&format!("{c}_bytes")),
            ident(&format!("{c}_version"))
        ));
    }
    out
}

/// The versioned upsert of one column for many rows (`$1` rows, `$2` texts, `$3` bytes, `$4`
/// versions: arrays of one length, no row twice).
pub fn upsert_sql(target: &str, column: &str) -> String {
    let (c, b, v) = (ident(column), ident(&format!("{column}_bytes")), ident(&format!("{column}_version")));
    format!(
        "INSERT INTO {t} AS t (\"row\", {c}, {b}, {v}) \
         SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[], $4::bigint[]) \
         ON CONFLICT (\"row\") DO UPDATE SET {c} = excluded.{c}, {b} = excluded.{b}, {v} = excluded.{v} \
         WHERE t.{v} IS NULL OR excluded.{v} > t.{v}",
        t = ident(target)
    )
}

/// The arrays of one column's upsert ([`upsert_sql`]).
#[derive(Default)]
struct Rows<'a> {
    rows: Vec<&'a str>,
    texts: Vec<Option<&'a str>>,
    bytes: Vec<Option<&'a [u8]>>,
    versions: Vec<i64>,
}

impl PostgresSink {
    /// A sink upserting into `target` at `url`; `columns` are the PostgreSQL columns of the
    /// sink's store columns, in order. Connects on the first delivery.
    pub fn new(url: &str, target: &str, columns: Vec<String>) -> PostgresSink {
        PostgresSink { url: url.to_owned(), target: target.to_owned(), columns, conn: None }
    }

    fn connect(&self) -> Result<(Client, Vec<Statement>), postgres::Error> {
        let mut config: postgres::Config = self.url.parse()?;
        config.connect_timeout(CONNECT_TIMEOUT);
        if config.get_application_name().is_none() {
            config.application_name("percolator-sink");
        }
        // A server that stalls (rather than refusing) fails the attempt after a while, so the
        // runner retries and its error shows, and a stop does not wait for ever.
        if config.get_options().is_none() {
            config.options(STATEMENT_TIMEOUT);
        }
        config.keepalives(true);
        let mut client = config.connect(NoTls)?;
        for sql in create_sql(&self.target, &self.columns) {
            client.batch_execute(&sql)?;
        }
        let statements =
            self.columns.iter().map(|c| client.prepare(&upsert_sql(&self.target, c))).collect::<Result<_, _>>()?;
        Ok((client, statements))
    }

    fn upsert(&mut self, batch: &Batch<'_>, column_of: &[usize]) -> Result<(), postgres::Error> {
        if self.conn.as_mut().is_none_or(|(c, _)| c.is_closed()) {
            self.conn = Some(self.connect()?);
        }
        let Some((client, statements)) = self.conn.as_mut() else { unreachable!("connected above") };
        // Per column, each PostgreSQL row once: at its newest change in the batch (the last
        // one, as the batch is in commit-timestamp order); the version check would refuse the
        // older ones anyway.
        let keys: Vec<String> = batch.changes.iter().map(|c| row_text(&c.cell.row)).collect();
        let mut newest: Vec<HashMap<&str, usize>> = vec![HashMap::new(); statements.len()];
        for (k, (key, &i)) in keys.iter().zip(column_of).enumerate() {
            newest[i].insert(key, k);
        }
        let mut columns: Vec<Rows<'_>> = (0..statements.len()).map(|_| Rows::default()).collect();
        for (k, ((change, key), &i)) in batch.changes.iter().zip(&keys).zip(column_of).enumerate() {
            if newest[i].get(key.as_str()) != Some(&k) {
                continue;
            }
            let (text, bytes): (Option<&str>, Option<&[u8]>) = match change.value.as_deref() {
                None => (None, None),
                Some(v) => match std::str::from_utf8(v) {
                    Ok(s) if !s.contains('\0') => (Some(s), None),
                    _ => (None, Some(v)),
                },
            };
            let rows = &mut columns[i];
            rows.rows.push(key);
            rows.texts.push(text);
            rows.bytes.push(bytes);
            // Commit timestamps fit in 63 bits (the oracle counts up from 1).
            rows.versions.push(change.commit_ts.raw() as i64);
        }
        let mut tx = client.transaction()?;
        for (rows, statement) in columns.iter().zip(statements.iter()) {
            if !rows.rows.is_empty() {
                tx.execute(statement, &[&rows.rows, &rows.texts, &rows.bytes, &rows.versions])?;
            }
        }
        tx.commit()
    }
}

impl Deliver for PostgresSink {
    fn deliver(&mut self, batch: &Batch<'_>) -> Result<(), Failure> {
        // The feed only returns the sink's columns; anything else is a bug, not a retry.
        let store_columns = batch_columns(batch);
        let column_of: Vec<usize> = store_columns
            .iter()
            .map(|c| c.ok_or_else(|| Failure::Retry("a change of a column the sink does not deliver".to_owned())))
            .collect::<Result<_, _>>()?;
        match self.upsert(batch, &column_of) {
            Ok(()) => Ok(()),
            Err(e) => {
                self.conn = None;
                Err(Failure::Retry(format!("PostgreSQL {}: {}", self.target, describe(&e))))
            }
        }
    }
}

/// The index of each change's column among the sink's (by the store column names the runner
/// passes along in [`Batch::columns`]).
fn batch_columns(batch: &Batch<'_>) -> Vec<Option<usize>> {
    batch.changes.iter().map(|c| batch.columns.iter().position(|s| *s == c.cell.column)).collect()
}

/// The error with its database message when there is one (`postgres::Error`'s `Display` alone
/// says only "db error").
fn describe(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{}: {}", db.code().code(), db.message()),
        None => {
            let mut s = e.to_string();
            let mut source = std::error::Error::source(e);
            while let Some(inner) = source {
                let _ = write!(s, ": {inner}");
                source = inner.source();
            }
            s
        }
    }
}
