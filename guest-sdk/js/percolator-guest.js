// percolator-guest: write a percolator observer in JavaScript (componentize-js).
//
// One ES module, vendored into a project by `percolator new NAME --lang js`. An observer is a
// function `observe(txn, notification)`; the component's entry module exports
// `exportObserver(observe, { txn, config })`, where `txn` and `config` are the WIT imports
// (`percolator:observer/txn@0.3.0`, `percolator:observer/config@0.3.0`). This module imports
// nothing, so the same observer runs natively under Node on `MemStore` (unit tests), with the
// host's semantics: snapshot reads with the transaction's own writes, commit-time write-write
// conflicts, declared writes, parameters. Integers are 8 bytes big-endian (as in the Rust SDK).
//
// Errors mirror the WIT `error` variant (`PercolatorError` with `kind` conflict, not-found,
// denied, invalid-argument, storage or failed); rethrow a conflict unchanged: the host retries
// the run. Any other exception becomes `failed` with its name and message
// (`TypeError: …`), so the dead letter says what happened.

const encoder = new TextEncoder();
const decoder = new TextDecoder('utf-8', { fatal: true });

export class PercolatorError extends Error {
  constructor(kind, message) {
    super(message);
    this.name = 'PercolatorError';
    this.kind = kind;
  }
}

const bytes = (row) => (typeof row === 'string' ? encoder.encode(row) : row);
const show = (row) => new TextDecoder().decode(bytes(row));

// Typed helpers over the raw operations (shared by the host's and the in-memory transaction).
class TxnBase {
  // Reads several cells ({ table, row, column }) at once, in the order given.
  getMany(cells) {
    return cells.map((c) => this.get(c.table, c.row, c.column));
  }

  getStr(table, row, column) {
    const v = this.get(table, row, column);
    if (v === undefined) return undefined;
    try {
      return decoder.decode(v);
    } catch {
      throw new PercolatorError('failed', `${table}/${show(row)}/${column} is not UTF-8`);
    }
  }

  setStr(table, row, column, value) {
    this.set(table, row, column, encoder.encode(value));
  }

  getU64(table, row, column) {
    const v = this.get(table, row, column);
    if (v === undefined) return undefined;
    if (v.length !== 8) throw new PercolatorError('failed', `${table}/${show(row)}/${column} is ${v.length} bytes, not a u64 (8)`);
    return new DataView(v.buffer, v.byteOffset, 8).getBigUint64(0);
  }

  setU64(table, row, column, value) {
    const b = new Uint8Array(8);
    new DataView(b.buffer).setBigUint64(0, BigInt(value));
    this.set(table, row, column, b);
  }

  addU64(table, row, column, delta) {
    const value = (this.getU64(table, row, column) ?? 0n) + BigInt(delta);
    this.setU64(table, row, column, value);
    return value;
  }
}

// The host's transaction, through the WIT imports.
class HostTxn extends TxnBase {
  constructor(imports) {
    super();
    this.imports = imports;
  }

  call(f, ...args) {
    try {
      return f(...args);
    } catch (e) {
      const p = e && e.payload;
      if (p && typeof p.tag === 'string') throw new PercolatorError(p.tag, p.val);
      throw e;
    }
  }

  get(table, row, column) {
    return this.call(this.imports.txn.get, table, bytes(row), column) ?? undefined;
  }

  getMany(cells) {
    const wit = cells.map((c) => ({ table: c.table, row: bytes(c.row), column: c.column }));
    return this.call(this.imports.txn.getMany, wit).map((v) => v ?? undefined);
  }

  scan(table, start, end, columns, limit) {
    return this.call(this.imports.txn.scan, table, bytes(start ?? ''), end === undefined ? undefined : bytes(end), columns, limit ?? 1000);
  }

  set(table, row, column, value) {
    this.call(this.imports.txn.set, table, bytes(row), column, value);
  }

  delete(table, row, column) {
    this.call(this.imports.txn.delete, table, bytes(row), column);
  }

  notifyWeak(table, row, column) {
    this.call(this.imports.txn.notifyWeak, table, bytes(row), column);
  }

  startTs() {
    return this.imports.txn.startTs();
  }

  param(key) {
    return this.imports.config ? (this.imports.config.get(key) ?? undefined) : undefined;
  }

  params() {
    return this.imports.config ? this.imports.config.all() : [];
  }
}

// A notification as observers see it: `table`, `row` (bytes), `column`, `weak`, `commitTs`,
// `attempt`.
function notification(wn) {
  return { table: wn.cell.table, row: wn.cell.row, column: wn.cell.column, weak: wn.weak, commitTs: wn.commitTs, attempt: wn.attempt };
}

// Runs the observer; an SDK error as is, any other exception as `failed`.
function guard(observe, txn, n) {
  try {
    observe(txn, n);
    return undefined;
  } catch (e) {
    if (e instanceof PercolatorError) return e;
    const text = e instanceof Error ? `${e.name}: ${e.message}` : `thrown: ${String(e)}`;
    console.error(text); // stderr: the host logs it
    return new PercolatorError('failed', text);
  }
}

// The component's `observe` export.
export function exportObserver(observe, imports) {
  return function (wn) {
    const error = guard(observe, new HostTxn(imports), notification(wn));
    // componentize-js returns a thrown value as the `err` of the export's result: the WIT
    // `error` variant, `{ tag, val }`.
    if (error) throw { tag: error.kind, val: error.message };
  };
}

// ---- natively: the in-memory store ----

const key = (table, row, column) => `${table}\u0000${Array.from(bytes(row)).join(',')}\u0000${column}`;

export class MemStore {
  constructor() {
    this.versions = new Map(); // key → [[ts, value|undefined]...]
    this.clock = 0;
    this.declared = undefined;
    this.parameters = new Map();
  }

  tick() {
    return ++this.clock;
  }

  read(k, ts) {
    const vs = (this.versions.get(k) ?? []).filter(([t]) => t < ts);
    return vs.length ? vs[vs.length - 1][1] : undefined;
  }

  write(k, ts, value) {
    if (!this.versions.has(k)) this.versions.set(k, []);
    this.versions.get(k).push([ts, value]);
  }

  put(table, row, column, value) {
    const ts = this.tick();
    this.write(key(table, row, column), ts, typeof value === 'string' ? encoder.encode(value) : value);
    return ts;
  }

  remove(table, row, column) {
    const ts = this.tick();
    this.write(key(table, row, column), ts, undefined);
    return ts;
  }

  get(table, row, column) {
    return this.read(key(table, row, column), this.clock + 1);
  }

  getStr(table, row, column) {
    const v = this.get(table, row, column);
    return v === undefined ? undefined : new TextDecoder().decode(v);
  }

  declareWrites(table, columns) {
    this.declared = new Set([...(this.declared ?? []), ...columns.map((c) => `${table}/${c}`)]);
  }

  setParam(k, v) {
    this.parameters.set(k, String(v));
  }

  notification(table, row, column) {
    return { table, row: bytes(row), column, weak: false, commitTs: undefined, attempt: 1 };
  }

  begin() {
    return new MemTxn(this, this.tick());
  }

  // Runs an observer the way the host does (one attempt): committed only if it succeeds;
  // its error (a PercolatorError, `failed` for any other exception) is thrown.
  observe(observe, n) {
    const txn = this.begin();
    const error = guard(observe, txn, n);
    if (error) throw error;
    return txn.commit();
  }
}

export class MemTxn extends TxnBase {
  constructor(store, start) {
    super();
    this.store = store;
    this.start = start;
    this.writes = new Map();
    this.weak = [];
  }

  get(table, row, column) {
    const k = key(table, row, column);
    if (this.writes.has(k)) return this.writes.get(k);
    return this.store.read(k, this.start);
  }

  // Cells of rows [start, end) of `table` in (row, column) order: { row, column, value }.
  scan(table, start, end, columns, limit) {
    const lo = bytes(start ?? '');
    const hi = end === undefined ? undefined : bytes(end);
    const cmp = (a, b) => {
      for (let i = 0; i < Math.min(a.length, b.length); i++) if (a[i] !== b[i]) return a[i] - b[i];
      return a.length - b.length;
    };
    const cells = new Map();
    const note = (k) => {
      const [t, r, c] = k.split('\u0000');
      if (t === table) cells.set(k, { row: new Uint8Array(r === '' ? [] : r.split(',').map(Number)), column: c });
    };
    for (const k of this.store.versions.keys()) note(k);
    for (const k of this.writes.keys()) note(k);
    const out = [];
    const sorted = [...cells.values()].sort((a, b) => cmp(a.row, b.row) || (a.column < b.column ? -1 : a.column > b.column ? 1 : 0));
    for (const c of sorted) {
      if (cmp(c.row, lo) < 0 || (hi !== undefined && cmp(c.row, hi) >= 0)) continue;
      if (columns && !columns.includes(c.column)) continue;
      const value = this.get(table, c.row, c.column);
      if (value !== undefined) out.push({ row: c.row, column: c.column, value });
      if (out.length >= Math.min(limit ?? 1000, 10000)) break;
    }
    return out;
  }

  notifyWeak(table, row, column) {
    this.weak.push({ table, row: bytes(row), column });
  }

  writable(table, column) {
    if (column.startsWith('__')) throw new PercolatorError('invalid-argument', `column ${column} is reserved`);
    if (this.store.declared && !this.store.declared.has(`${table}/${column}`)) {
      throw new PercolatorError('denied', `the binding does not declare a write to ${table}/${column}`);
    }
  }

  set(table, row, column, value) {
    this.writable(table, column);
    this.writes.set(key(table, row, column), value);
  }

  delete(table, row, column) {
    this.writable(table, column);
    this.writes.set(key(table, row, column), undefined);
  }

  startTs() {
    return this.start;
  }

  param(k) {
    return this.store.parameters.get(k);
  }

  params() {
    return [...this.store.parameters.entries()].sort();
  }

  commit() {
    for (const k of this.writes.keys()) {
      const vs = this.store.versions.get(k) ?? [];
      if (vs.length && vs[vs.length - 1][0] > this.start) {
        throw new PercolatorError('conflict', `a cell was written at ${vs[vs.length - 1][0]}, after ${this.start}`);
      }
    }
    const ts = this.store.tick();
    for (const [k, v] of this.writes) this.store.write(k, ts, v);
    return ts;
  }
}
