import test from 'node:test';
import assert from 'node:assert/strict';
import { MemStore, PercolatorError } from './percolator-guest.js';
import { SOURCE, TARGET, observeUppercase } from './app.js';

test('writes the upper-cased text to the same row', () => {
  const store = new MemStore();
  store.declareWrites('docs', [TARGET]);
  store.put('docs', 'r1', SOURCE, 'Hello, wörld');
  store.observe(observeUppercase, store.notification('docs', 'r1', SOURCE));
  assert.equal(store.getStr('docs', 'r1', TARGET), 'HELLO, WÖRLD');
  assert.equal(store.get('docs', 'r2', TARGET), undefined);
});

test('the target column is the binding parameter', () => {
  const store = new MemStore();
  store.setParam('target', 'derived:shout');
  store.put('docs', 'r1', SOURCE, 'hi');
  store.observe(observeUppercase, store.notification('docs', 'r1', SOURCE));
  assert.equal(store.getStr('docs', 'r1', 'derived:shout'), 'HI');
});

test('non-UTF-8 fails and writes nothing', () => {
  const store = new MemStore();
  store.put('docs', 'r1', SOURCE, new Uint8Array([0xff, 0xfe]));
  assert.throws(() => store.observe(observeUppercase, store.notification('docs', 'r1', SOURCE)), (e) => e instanceof PercolatorError && e.kind === 'failed');
  assert.equal(store.get('docs', 'r1', TARGET), undefined);
});

test('an undeclared write is denied', () => {
  const store = new MemStore();
  store.declareWrites('docs', ['derived:other']);
  store.put('docs', 'r1', SOURCE, 'x');
  assert.throws(() => store.observe(observeUppercase, store.notification('docs', 'r1', SOURCE)), (e) => e.kind === 'denied');
});
