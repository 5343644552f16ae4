import test from 'node:test';
import assert from 'node:assert/strict';
import { MemStore, PercolatorError } from './percolator-guest.js';
import { observeClustering, parsePagerank } from './app.js';

const H1 = '1'.repeat(32);
const H2 = '2'.repeat(32);

function page(s, url, hash, pagerank) {
  if (hash) s.put('pages', url, 'doc:hash', hash);
  else s.remove('pages', url, 'doc:hash');
  if (pagerank) s.put('pages', url, 'raw:pagerank', pagerank);
  else s.remove('pages', url, 'raw:pagerank');
  s.observe(observeClustering, s.notification('pages', url, 'doc:hash'));
}

test('the highest PageRank, then the smallest URL, is canonical', () => {
  const s = new MemStore();
  page(s, 'b', H1, '0.5');
  page(s, 'a', H1, '0.5');
  page(s, 'c', H1, '0.2');
  assert.equal(s.getStr('clusters', H1, 'canon:url'), 'a');
  for (const url of ['a', 'b', 'c']) assert.equal(s.getStr('pages', url, 'cluster:canonical'), 'a');
  page(s, 'c', H1, '0.9');
  assert.equal(s.getStr('clusters', H1, 'canon:url'), 'c');
});

test('moving to another cluster settles both', () => {
  const s = new MemStore();
  page(s, 'a', H1, '0.5');
  page(s, 'b', H1, '0.1');
  page(s, 'a', H2, '0.5');
  assert.equal(s.getStr('clusters', H1, 'canon:url'), 'b');
  assert.equal(s.getStr('clusters', H2, 'canon:url'), 'a');
  page(s, 'a', undefined, '0.5');
  assert.equal(s.get('clusters', H2, 'canon:url'), undefined);
  assert.equal(s.get('pages', 'a', 'cluster:canonical'), undefined);
});

test('a bad PageRank fails naming the cell', () => {
  const s = new MemStore();
  assert.throws(() => page(s, 'a', H1, '-1'), (e) => e instanceof PercolatorError && e.message.includes('pages/a/raw:pagerank'));
  for (const bad of ['nan', 'inf', '1_0', 'x', '']) assert.throws(() => parsePagerank(bad));
  assert.equal(parsePagerank(' 0.25 '), 0.25);
});
