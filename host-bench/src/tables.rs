//! What the web-index benchmarks (`main.rs`'s incremental one, `bin/webindex-load.rs`) read
//! back to compare with the batch computation.

use percolator_store::Store;
use webindex::batch::{self, Tables};
use webindex::schema;

/// Every user cell of the pipeline's tables, trigger columns excluded, normalized.
pub(crate) fn read_tables(store: &Store) -> Result<Tables, Box<dyn std::error::Error>> {
    let txn = store.begin()?;
    let mut tables = Tables::new();
    for table in [schema::PAGES, schema::CLUSTERS, schema::INLINKS, schema::PENDING, schema::INDEX] {
        let cells: batch::Table = txn
            .scan(table, b"", None, None, usize::MAX)?
            .into_iter()
            .filter(|e| e.column != schema::LINK_DIRTY && e.column != schema::EXPORT_DIRTY)
            .map(|e| ((e.row, e.column), e.value))
            .collect();
        tables.insert(table.to_owned(), cells);
    }
    batch::normalize(&mut tables);
    Ok(tables)
}
