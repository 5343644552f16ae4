// clustering, in JavaScript: a port of the web index's Rust clustering observer
// (guest-examples/webindex/src/observers/clustering.rs), writing the same cells with the same
// bytes, so that apps/webindex's incremental = batch check holds with it bound instead.
//
// Pages with equal `doc:hash` form a cluster with one canonical URL (the highest PageRank, then
// the smallest URL bytewise). Bind to `pages/doc:hash` and `pages/raw:pagerank`, as
// config/web-index.toml binds the Rust one (see the Rust file for why each write is made).

import { PercolatorError } from './percolator-guest.js';

const PAGES = 'pages';
const CLUSTERS = 'clusters';
const DOC_HASH = 'doc:hash';
const CLUSTER_HASH = 'cluster:hash';
const CLUSTER_CANONICAL = 'cluster:canonical';
const RAW_PAGERANK = 'raw:pagerank';
const EXPORT_DIRTY = 'export:dirty';
const MEMBER_PAGERANK = 'member:pagerank';
const CANON_URL = 'canon:url';
const ABSENT_PAGERANK = '0';
const PAGE = 10000;

const enc = new TextEncoder();
const strict = new TextDecoder('utf-8', { fatal: true });
const lossy = new TextDecoder();

const badCell = (table, row, column, message) => new PercolatorError('failed', `${table}/${lossy.decode(row)}/${column}: ${message}`);

function text(table, row, column, value) {
  try {
    return strict.decode(value);
  } catch (e) {
    throw badCell(table, row, column, `not UTF-8: ${e.message}`);
  }
}

function decodeHash(table, row, column, value) {
  if (/^[0-9a-f]{32}$/.test(value)) return value;
  throw badCell(table, row, column, `${JSON.stringify(value)} is not a content hash (32 lowercase hex digits)`);
}

// As the Rust parse_pagerank: a finite, non-negative decimal number (surrounding whitespace
// allowed); -0 is 0.
export function parsePagerank(value) {
  const t = value.trim();
  if (!/^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/.test(t)) throw new Error(`${JSON.stringify(value)} is not a number`);
  const v = Number(t);
  if (!Number.isFinite(v)) throw new Error(`${JSON.stringify(value)} is not a finite number`);
  if (v < 0) throw new Error(`${JSON.stringify(value)} is negative`);
  return v + 0;
}

const joinRow = (a, b) => enc.encode(`${a} ${b}`);

function compareBytes(a, b) {
  for (let i = 0; i < Math.min(a.length, b.length); i++) if (a[i] !== b[i]) return a[i] - b[i];
  return a.length - b.length;
}

function scanPrefix(txn, table, prefix, column) {
  let start = enc.encode(`${prefix} `);
  const end = enc.encode(`${prefix}!`);
  const prefixLength = enc.encode(prefix).length;
  const out = [];
  for (;;) {
    const page = txn.scan(table, start, end, [column], PAGE);
    if (page.length === 0) return out;
    const last = page[page.length - 1].row;
    start = new Uint8Array(last.length + 1);
    start.set(last);
    for (const entry of page) {
      let suffix;
      try {
        suffix = strict.decode(entry.row.subarray(prefixLength + 1));
      } catch {
        throw badCell(table, entry.row, column, 'the row key is not UTF-8');
      }
      out.push([suffix, text(table, entry.row, column, entry.value)]);
    }
  }
}

function settle(txn, hash) {
  const members = scanPrefix(txn, CLUSTERS, hash, MEMBER_PAGERANK);
  let best;
  for (const [url, pagerank] of members) {
    let rank;
    try {
      rank = parsePagerank(pagerank);
    } catch (e) {
      throw badCell(CLUSTERS, joinRow(hash, url), MEMBER_PAGERANK, e.message);
    }
    if (best === undefined || rank > best[1] || (rank === best[1] && compareBytes(enc.encode(url), enc.encode(best[0])) < 0)) {
      best = [url, rank];
    }
  }
  if (best === undefined) {
    txn.delete(CLUSTERS, enc.encode(hash), CANON_URL);
    return;
  }
  const canonical = best[0];
  txn.setStr(CLUSTERS, enc.encode(hash), CANON_URL, canonical);
  const cells = members.map(([url]) => ({ table: PAGES, row: enc.encode(url), column: CLUSTER_CANONICAL }));
  const current = [];
  for (let i = 0; i < cells.length; i += PAGE) current.push(...txn.getMany(cells.slice(i, i + PAGE)));
  members.forEach(([url], i) => {
    const value = current[i];
    if (value === undefined || compareBytes(value, enc.encode(canonical)) !== 0) {
      txn.setStr(PAGES, enc.encode(url), CLUSTER_CANONICAL, canonical);
      txn.notifyWeak(PAGES, enc.encode(url), EXPORT_DIRTY);
    }
  });
}

export function observeClustering(txn, n) {
  const row = n.row;
  let url;
  try {
    url = strict.decode(row);
  } catch {
    throw new PercolatorError('failed', `${n.table}/${lossy.decode(row)}/${n.column}: the row key is not UTF-8`);
  }
  const columns = [DOC_HASH, CLUSTER_HASH, RAW_PAGERANK, CLUSTER_CANONICAL];
  const values = txn.getMany(columns.map((column) => ({ table: PAGES, row, column })));
  let [hash, registered, pagerank, canonical] = values.map((v, i) => (v === undefined ? undefined : text(PAGES, row, columns[i], v)));
  if (hash !== undefined) hash = decodeHash(PAGES, row, DOC_HASH, hash);
  if (registered !== undefined) registered = decodeHash(PAGES, row, CLUSTER_HASH, registered);
  if (pagerank !== undefined) {
    try {
      parsePagerank(pagerank);
    } catch (e) {
      throw badCell(PAGES, row, RAW_PAGERANK, e.message);
    }
  }
  if (registered !== undefined && registered !== hash) {
    txn.delete(CLUSTERS, joinRow(registered, url), MEMBER_PAGERANK);
    settle(txn, registered);
  }
  if (hash !== undefined) {
    const member = joinRow(hash, url);
    const pr = pagerank ?? ABSENT_PAGERANK;
    const stored = txn.get(CLUSTERS, member, MEMBER_PAGERANK);
    if (stored === undefined || compareBytes(stored, enc.encode(pr)) !== 0) txn.setStr(CLUSTERS, member, MEMBER_PAGERANK, pr);
    txn.setStr(PAGES, row, CLUSTER_HASH, hash);
    settle(txn, hash);
  } else {
    txn.delete(PAGES, row, CLUSTER_HASH);
    if (canonical !== undefined) {
      txn.delete(PAGES, row, CLUSTER_CANONICAL);
      txn.notifyWeak(PAGES, row, EXPORT_DIRTY);
    }
  }
}
