//! Which cells a binding may read and write (declared in TOML, enforced on every host call).

use std::fmt;

/// One declared column: a table and either an exact column or a family prefix (`family:*`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ColumnRule {
    /// Table name.
    pub table: String,
    /// Exact column, or a prefix if `prefix` is set.
    pub column: String,
    /// Matches every column starting with `column` (written `family:*`).
    pub prefix: bool,
}

impl ColumnRule {
    /// Parses `table/column` or `table/family:*`.
    pub fn parse(s: &str) -> Result<ColumnRule, String> {
        let (table, column) = s
            .split_once('/')
            .ok_or_else(|| format!("{s:?} is not of the form \"table/column\" or \"table/family:*\""))?;
        let (column, prefix) = match column.strip_suffix('*') {
            Some(p) => (p, true),
            None => (column, false),
        };
        percolator_store::validate_table(table).map_err(|e| format!("{s:?}: {e}"))?;
        if !prefix {
            percolator_store::validate_column(column).map_err(|e| format!("{s:?}: {e}"))?;
        } else if column.contains('*') {
            return Err(format!("{s:?}: only a trailing * is allowed"));
        }
        Ok(ColumnRule { table: table.to_owned(), column: column.to_owned(), prefix })
    }

    /// True if the rule covers `table/column`.
    pub fn matches(&self, table: &str, column: &str) -> bool {
        self.table == table && if self.prefix { column.starts_with(&self.column) } else { self.column == column }
    }
}

impl fmt::Display for ColumnRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}{}", self.table, self.column, if self.prefix { "*" } else { "" })
    }
}

/// The declared access of one binding.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Access {
    /// Readable columns (the observed column and every writable column are readable too).
    pub reads: Vec<ColumnRule>,
    /// Writable columns (set, delete) and weak-notify targets.
    pub writes: Vec<ColumnRule>,
}

impl Access {
    /// May the observer read `table/column`?
    pub fn can_read(&self, table: &str, column: &str) -> bool {
        self.reads.iter().chain(&self.writes).any(|r| r.matches(table, column))
    }

    /// May the observer write (or weakly notify) `table/column`?
    pub fn can_write(&self, table: &str, column: &str) -> bool {
        self.writes.iter().any(|r| r.matches(table, column))
    }

    /// May a scan of `table` over `columns` (None: all) run? Every scanned column must be readable.
    pub fn can_scan(&self, table: &str, columns: Option<&[String]>) -> bool {
        match columns {
            // An empty filter would match nothing yet walk the whole table: refused.
            Some(cols) => !cols.is_empty() && cols.iter().all(|c| self.can_read(table, c)),
            // An unfiltered scan sees every column of the table: only a `table/*` rule allows it.
            None => self.reads.iter().chain(&self.writes).any(|r| r.table == table && r.prefix && r.column.is_empty()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_parse_and_match() {
        let exact = ColumnRule::parse("docs/raw:text").unwrap();
        assert!(
            exact.matches("docs", "raw:text") && !exact.matches("docs", "raw:textx") && !exact.matches("d", "raw:text")
        );
        let fam = ColumnRule::parse("docs/derived:*").unwrap();
        assert!(fam.matches("docs", "derived:upper") && !fam.matches("docs", "raw:text"));
        assert!(ColumnRule::parse("nocolumn").is_err());
        assert!(ColumnRule::parse("t/__ack").is_err());
        assert!(ColumnRule::parse("t/a*b*").is_err());
        let access = Access { reads: vec![exact], writes: vec![fam] };
        assert!(access.can_read("docs", "derived:upper"), "writable implies readable");
        assert!(!access.can_write("docs", "raw:text"));
        assert!(!access.can_scan("docs", None));
        assert!(access.can_scan("docs", Some(&["raw:text".into()])));
        assert!(!access.can_scan("docs", Some(&[])), "an empty filter would walk the table for nothing");
    }
}
