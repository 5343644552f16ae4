// hostile, in JavaScript: one component that misbehaves as its binding's `mode` parameter says,
// for the host's sandbox tests.
//
// - `spin`: loops forever (the deadline stops it);
// - `bomb`: allocates without end (the memory limit stops it);
// - `fetch`: calls fetch() (the build leaves out wasi:http: the runtime aborts, a trap);
// - `throw`: reads a property of null (the TypeError's message reaches the dead letter);
// - `combine`: combines deltas of every kind into `sum:i` (sum i64), `sum:f` (sum f64) and
//   `set:s` (set), then three of the wrong kind (a float into `sum:i`, an integer into the
//   uncombined `out:combine`, a string), each refused with invalid-argument; writes the total
//   it reads and the kinds of the refusals.

import { PercolatorError } from './percolator-guest.js';

export function observeHostile(txn, n) {
  const mode = txn.param('mode');
  const out = `out:${mode}`;
  if (mode === 'spin') {
    for (;;) {}
  } else if (mode === 'bomb') {
    const hoard = [];
    for (;;) hoard.push(new Uint8Array(1 << 20).fill(1));
  } else if (mode === 'fetch') {
    txn.setStr(n.table, n.row, out, String(fetch('http://127.0.0.1:7878/')));
  } else if (mode === 'throw') {
    console.error('about to fail');
    const nothing = null;
    txn.setStr(n.table, n.row, out, nothing.value);
  } else if (mode === 'combine') {
    txn.combine(n.table, n.row, 'sum:i', 2);
    txn.combine(n.table, n.row, 'sum:i', 3n);
    txn.combine(n.table, n.row, 'sum:f', 1.5);
    txn.combine(n.table, n.row, 'sum:f', 1);
    txn.combine(n.table, n.row, 'set:s', ['b', 'a']);
    txn.combine(n.table, n.row, 'set:s', new Set(['c']));
    const seen = [`read ${txn.getStr(n.table, n.row, 'sum:i')}`];
    for (const [column, delta] of [['sum:i', 0.5], [out, 1], ['sum:i', 'seven']]) {
      try {
        txn.combine(n.table, n.row, column, delta);
        seen.push('accepted');
      } catch (e) {
        if (!(e instanceof PercolatorError)) throw e;
        seen.push(e.kind);
      }
    }
    txn.setStr(n.table, n.row, out, seen.join('; '));
  } else {
    throw new Error(`unknown mode ${mode}`);
  }
}
