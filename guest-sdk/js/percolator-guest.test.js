// The SDK's own tests (node --test, from this folder; scripts/test runs them): combined columns
// on MemStore, the delta kinds and the store's float text.
import test from 'node:test';
import assert from 'node:assert/strict';
import { MemStore, PercolatorError, formatF64, toDelta } from './percolator-guest.js';

// t/c:n sum i64, t/c:f sum f64, t/c:lo min i64, t/c:tags set.
function combined() {
  const store = new MemStore();
  store.combineColumn('t', 'c:n', 'sum', 'i64');
  store.combineColumn('t', 'c:f', 'sum', 'f64');
  store.combineColumn('t', 'c:lo', 'min', 'i64');
  store.combineColumn('t', 'c:tags', 'set', 'set');
  return store;
}

function run(store, f) {
  const txn = store.begin();
  f(txn);
  return txn.commit();
}

const invalid = (message) => (e) => e instanceof PercolatorError && e.kind === 'invalid-argument' && e.message.includes(message);

test('delta kinds', () => {
  assert.deepEqual(toDelta('t', 'r', 'c', 3n), { tag: 'int', val: 3n });
  assert.deepEqual(toDelta('t', 'r', 'c', 3), { tag: 'int', val: 3n });
  assert.deepEqual(toDelta('t', 'r', 'c', 2.0), { tag: 'int', val: 2n });
  assert.deepEqual(toDelta('t', 'r', 'c', -2.5), { tag: 'float', val: -2.5 });
  assert.deepEqual(toDelta('t', 'r', 'c', ['a', 'b']), { tag: 'members', val: ['a', 'b'] });
  assert.deepEqual(toDelta('t', 'r', 'c', new Set(['a'])), { tag: 'members', val: ['a'] });
  assert.deepEqual(toDelta('t', 'r', 'c', 2 ** 64), { tag: 'float', val: 2 ** 64 }, 'beyond 2^53 a Number is not exact');
  for (const bad of ['a', null, undefined, true, { a: 1 }, ['a', 1], 1n << 63n]) {
    assert.throws(() => toDelta('t', 'r', 'c:x', bad), invalid('combine into t/c:x of row "r"'), String(bad));
  }
});

test('floats are written as the store writes them', () => {
  const cases = [[1e16, '1e16'], [1e15, '1000000000000000.0'], [0.0001, '0.0001'], [0.00001, '1e-5'], [1.5e-7, '1.5e-7'],
    [1e300, '1e300'], [3, '3.0'], [-0, '-0.0'], [1.2345e20, '1.2345e20'], [5e-324, '5e-324'], [0.1, '0.1']];
  for (const [f, text] of cases) assert.equal(formatF64(f), text);
});

test('concurrent combines into one cell all commit', () => {
  const store = combined();
  const txns = [0, 1, 2, 3, 4].map(() => store.begin());
  txns.forEach((t, i) => {
    t.combine('t', 'r', 'c:n', i + 1);
    t.combine('t', 'r', 'c:tags', [`m${i % 2}`]);
  });
  for (const t of txns) t.commit();
  assert.equal(store.getStr('t', 'r', 'c:n'), '15');
  assert.equal(store.getStr('t', 'r', 'c:tags'), '["m0","m1"]');
  const [reset, add, otherReset] = [store.begin(), store.begin(), store.begin()];
  reset.setStr('t', 'r', 'c:n', '100');
  add.combine('t', 'r', 'c:n', 1n);
  otherReset.delete('t', 'r', 'c:n');
  add.commit();
  reset.commit();
  assert.throws(() => otherReset.commit(), (e) => e.kind === 'conflict');
  assert.equal(store.getStr('t', 'r', 'c:n'), '101', 'the delta committed during the reset applies on top');
});

test('reads fold the snapshot with own deltas', () => {
  const store = combined();
  run(store, (t) => t.combine('t', 'r', 'c:n', 10));
  const txn = store.begin();
  run(store, (t) => t.combine('t', 'r', 'c:n', 1000)); // after the snapshot
  assert.equal(txn.getStr('t', 'r', 'c:n'), '10');
  txn.combine('t', 'r', 'c:n', 5);
  txn.combine('t', 'r', 'c:n', -2);
  assert.equal(txn.getStr('t', 'r', 'c:n'), '13');
  assert.deepEqual([...txn.bufferedCombines()], [['t/r/c:n', '3']]);
  assert.equal(txn.writes.size, 0, 'a combine is not a write');
  assert.deepEqual(
    txn.scan('t').map((e) => [new TextDecoder().decode(e.row), new TextDecoder().decode(e.value)]),
    [['r', '13']],
  );
  txn.commit();
  assert.equal(store.getStr('t', 'r', 'c:n'), '1013');
});

test('values are text of the type', () => {
  const store = combined();
  run(store, (t) => {
    t.combine('t', 'r', 'c:f', 2.5);
    t.combine('t', 'r', 'c:f', 1);
    t.combine('t', 's', 'c:f', 1e300);
    t.combine('t', 'r', 'c:lo', 7);
    t.combine('t', 'r', 'c:lo', -3);
    t.combine('t', 'r', 'c:tags', ['b', 'a"q', 'b', '\u{1F600}', '\uFF5E']);
    t.combine('t', 's', 'c:tags', []);
  });
  run(store, (t) => t.combine('t', 'r', 'c:lo', 4));
  run(store, (t) => t.combine('t', 't', 'c:f', 3));
  assert.equal(store.getStr('t', 'r', 'c:f'), '3.5');
  assert.equal(store.getStr('t', 's', 'c:f'), '1e300');
  assert.equal(store.getStr('t', 't', 'c:f'), '3.0');
  assert.equal(store.getStr('t', 'r', 'c:lo'), '-3');
  // In byte order: U+FF5E (EF BD 9E) before U+1F600 (F0 ...), unlike UTF-16 order.
  assert.equal(store.getStr('t', 'r', 'c:tags'), '["a\\"q","b","\uFF5E","\u{1F600}"]');
  assert.equal(store.getStr('t', 's', 'c:tags'), '[]');
  const max = (1n << 63n) - 1n;
  for (const d of [max, 1n, -1n]) run(store, (t) => t.combine('t', 'big', 'c:n', d));
  assert.equal(store.getStr('t', 'big', 'c:n'), String(max - 1n), 'i64 sums saturate at each step');
});

test('set and delete reset a combined column', () => {
  const store = combined();
  run(store, (t) => t.combine('t', 'r', 'c:n', 10));
  const txn = store.begin();
  txn.combine('t', 'r', 'c:n', 1);
  txn.setStr('t', 'r', 'c:n', '5');
  assert.equal(txn.getStr('t', 'r', 'c:n'), '5', 'the own delta went too');
  txn.combine('t', 'r', 'c:n', 2);
  assert.equal(txn.getStr('t', 'r', 'c:n'), '7', 'folded into the reset');
  run(store, (t) => t.combine('t', 'r', 'c:n', 100)); // while the reset runs
  txn.commit();
  assert.equal(store.getStr('t', 'r', 'c:n'), '107');
  run(store, (t) => t.delete('t', 'r', 'c:n'));
  assert.equal(store.get('t', 'r', 'c:n'), undefined);
  run(store, (t) => t.combine('t', 'r', 'c:n', -4));
  assert.equal(store.getStr('t', 'r', 'c:n'), '-4');
  store.put('t', 'r', 'c:n', '1');
  run(store, (t) => t.combine('t', 'r', 'c:n', 1));
  assert.equal(store.getStr('t', 'r', 'c:n'), '2');
});

test('errors name the cell', () => {
  const store = combined();
  const txn = store.begin();
  const cases = [
    ['c:plain', 1, 'not declared combined'],
    ['c:n', 1.5, 'combine into t/c:n of row "r": a float delta'],
    ['c:n', ['a'], 'set members, but the column holds i64 (sum)'],
    ['c:tags', 1, 'an integer delta, but the column holds set (set)'],
    ['c:f', NaN, 'not a finite number'],
    ['c:f', Infinity, 'not a finite number'],
  ];
  for (const [column, delta, message] of cases) assert.throws(() => txn.combine('t', 'r', column, delta), invalid(message));
  for (const [column, value] of [['c:n', '1.5'], ['c:tags', '[1]'], ['c:f', 'Infinity'], ['c:n', ' 1']]) {
    assert.throws(() => txn.setStr('t', 'r', column, value), invalid('set of the combined column'));
  }
  assert.throws(() => store.combineColumn('t', 'c:x', 'sum', 'set'), invalid('does not apply'));
  assert.throws(() => store.combineColumn('t', 'c:x', 'set', 'i64'), invalid('does not apply'));
  store.declareWrites('t', ['c:f']);
  assert.throws(() => txn.combine('t', 'r', 'c:n', 1), (e) => e.kind === 'denied');
  txn.combine('t', 'r', 'c:f', 1);
  txn.commit();
  assert.equal(store.getStr('t', 'r', 'c:f'), '1.0');
});
