// uppercase, in JavaScript: the Rust guest-examples/uppercase, line for line.
//
// Bind it to `raw:text`: it writes the upper-cased text to `derived:upper` of the same row (or
// to the column its binding's `target` parameter names), and deletes it when `raw:text` is
// gone. A value that is not UTF-8 fails the run.

export const SOURCE = 'raw:text';
export const TARGET = 'derived:upper';

export function observeUppercase(txn, n) {
  const target = txn.param('target') ?? TARGET;
  const text = txn.getStr(n.table, n.row, SOURCE);
  if (text === undefined) {
    txn.delete(n.table, n.row, target);
  } else {
    txn.setStr(n.table, n.row, target, text.toUpperCase());
  }
}
