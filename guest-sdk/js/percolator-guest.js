// percolator-guest: write a percolator observer in JavaScript (componentize-js).
//
// One ES module, vendored into a project by `percolator new NAME --lang js`. An observer is a
// function `observe(txn, notification)`; the component's entry module exports
// `exportObserver(observe, { txn, config })`, where `txn` and `config` are the WIT imports
// (`percolator:observer/txn@0.3.0`, `percolator:observer/config@0.3.0`). This module imports
// nothing, so the same observer runs natively under Node on `MemStore` (unit tests), with the
// host's semantics: snapshot reads with the transaction's own writes, commit-time write-write
// conflicts, declared writes, combined columns, parameters. Integers are 8 bytes big-endian (as
// in the Rust SDK).
//
// Combined columns (a `[[combine]]` of the host's configuration; `MemStore.combineColumn`
// natively) are added to with `txn.combine(table, row, column, delta)`: a BigInt, or a Number
// that is an integer (a safe one, |n| < 2^53: larger Numbers are not exact), is an integer
// delta; any other Number a float one; an Array or Set of strings set members. Combines never conflict with each other; reads return the folded total
// as text (`42`, `2.5`, `["a","b"]`); `set`/`delete` of the column reset it.
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

const I64_MIN = -(1n << 63n);
const I64_MAX = (1n << 63n) - 1n;

// A combine's `delta` as the WIT `delta` variant: `{ tag: 'int', val: BigInt }`,
// `{ tag: 'float', val: Number }` or `{ tag: 'members', val: [string] }`.
export function toDelta(table, row, column, delta) {
  const wrong = (what) => new PercolatorError('invalid-argument', `combine into ${table}/${column} of row ${JSON.stringify(show(row))}: ${what}`);
  const int = (i) => {
    if (i < I64_MIN || i > I64_MAX) throw wrong(`the delta ${i} is outside the 64-bit signed range`);
    return { tag: 'int', val: i };
  };
  if (typeof delta === 'bigint') return int(delta);
  if (typeof delta === 'number') return Number.isSafeInteger(delta) ? int(BigInt(delta)) : { tag: 'float', val: delta };
  if (Array.isArray(delta) || delta instanceof Set) {
    const members = [...delta];
    const bad = members.find((m) => typeof m !== 'string');
    if (bad !== undefined || members.length !== (Array.isArray(delta) ? delta.length : delta.size)) {
      throw wrong(`set members must be strings, not ${typeof bad} (${String(bad)})`);
    }
    return { tag: 'members', val: members };
  }
  throw wrong(`a delta is a BigInt, a Number or an Array/Set of strings, not ${delta === null ? 'null' : typeof delta}`);
}

// Rust's `{:?}` of an f64 (the store's text): shortest round-trip digits, an exponent below
// 1e-4 and from 1e16 (`1e16`, `1.5e-7`), else decimal with at least one fraction digit (`3.0`).
export function formatF64(x) {
  if (x === 0) return Object.is(x, -0) ? '-0.0' : '0.0';
  const [mantissa, e] = x.toExponential().split('e'); // shortest round-trip digits
  const exp = Number(e);
  if (Math.abs(x) < 1e-4 || Math.abs(x) >= 1e16) return `${mantissa}e${exp}`;
  const sign = x < 0 ? '-' : '';
  const digits = mantissa.replace('-', '').replace('.', '');
  if (exp < 0) return `${sign}0.${'0'.repeat(-exp - 1)}${digits}`;
  if (digits.length <= exp + 1) return `${sign}${digits}${'0'.repeat(exp + 1 - digits.length)}.0`;
  return `${sign}${digits.slice(0, exp + 1)}.${digits.slice(exp + 1)}`;
}

const compareBytes = (a, b) => {
  for (let i = 0; i < Math.min(a.length, b.length); i++) if (a[i] !== b[i]) return a[i] - b[i];
  return a.length - b.length;
};

// A combined column's op and type, with the store's parsing, text and folding. Values: BigInt
// (i64), Number (f64), Set of strings (set).
class Combined {
  constructor(op, type) {
    this.op = op;
    this.type = type;
  }

  // The checked value of a delta `{ tag, val }` for `cell` ({ table, row, column }).
  delta(cell, d) {
    const wrong = (what) =>
      new PercolatorError('invalid-argument', `combine into ${cell.table}/${cell.column} of row ${JSON.stringify(show(cell.row))}: ${what}`);
    if (this.type === 'i64' && d.tag === 'int') return d.val;
    if (this.type === 'f64' && d.tag === 'int') return Number(d.val);
    if (this.type === 'f64' && d.tag === 'float') {
      if (!Number.isFinite(d.val)) throw wrong(`the delta ${d.val} is not a finite number`);
      return d.val;
    }
    if (this.type === 'set' && d.tag === 'members') return new Set(d.val);
    const what = { int: 'an integer delta', float: 'a float delta', members: 'set members' }[d.tag];
    throw wrong(`${what}, but the column holds ${this.type} (${this.op})`);
  }

  // The stored text (bytes) as a value of the type, or undefined if it is not one.
  parse(value) {
    let text;
    try {
      text = decoder.decode(value);
    } catch {
      return undefined;
    }
    if (this.type === 'i64') {
      if (!/^[+-]?[0-9]+$/.test(text)) return undefined;
      const i = BigInt(text);
      return i < I64_MIN || i > I64_MAX ? undefined : i;
    }
    if (this.type === 'f64') {
      if (!/^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$/.test(text)) return undefined;
      const f = Number(text);
      return Number.isFinite(f) ? f : undefined;
    }
    let members;
    try {
      members = JSON.parse(text);
    } catch {
      return undefined;
    }
    return Array.isArray(members) && members.every((m) => typeof m === 'string') ? new Set(members) : undefined;
  }

  encode(acc) {
    if (this.type === 'i64') return encoder.encode(acc.toString());
    if (this.type === 'f64') return encoder.encode(formatF64(acc));
    const members = [...acc].sort((a, b) => compareBytes(encoder.encode(a), encoder.encode(b)));
    return encoder.encode(JSON.stringify(members));
  }

  fold(acc, delta) {
    if (acc === undefined) return delta;
    switch (this.op) {
      case 'sum': {
        if (this.type === 'f64') return acc + delta;
        const s = acc + delta; // saturates at each step
        return s < I64_MIN ? I64_MIN : s > I64_MAX ? I64_MAX : s;
      }
      case 'min':
        return delta < acc ? delta : acc;
      case 'max':
        return delta > acc ? delta : acc;
      default:
        return new Set([...acc, ...delta]);
    }
  }
}

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

  // Adds `delta` to a combined column at commit (see the module's comment for the kinds).
  combine(table, row, column, delta) {
    this.call(this.imports.txn.combine, table, bytes(row), column, toDelta(table, row, column, delta));
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
const unkey = (k) => {
  const [table, r, column] = k.split('\u0000');
  return { table, row: new Uint8Array(r === '' ? [] : r.split(',').map(Number)), column };
};

export class MemStore {
  constructor() {
    this.versions = new Map(); // key → [[ts, value|undefined]...]
    this.clock = 0;
    this.declared = undefined;
    this.parameters = new Map();
    this.combined = new Map(); // `table\0column` → Combined
    // Deltas committed to combined cells: key → [[commit ts, delta]...], apart from
    // `versions` (their bases, i.e. resets) so that combines never conflict.
    this.deltas = new Map();
    // The start ts of each reset of a combined cell, by its commit ts: the reset discarded
    // the deltas committed below its start; those above apply on top.
    this.resetStarts = new Map(); // key → Map(commit ts → start ts)
  }

  tick() {
    return ++this.clock;
  }

  read(k, ts) {
    const vs = (this.versions.get(k) ?? []).filter(([t]) => t < ts);
    return vs.length ? vs[vs.length - 1][1] : undefined;
  }

  spec(k) {
    const { table, column } = unkey(k);
    return this.combined.get(`${table}\u0000${column}`);
  }

  // A combined cell's total before `ts`: the last reset's value folded, in commit order, with
  // every delta committed after that reset's start (undefined: nothing).
  fold(spec, k, ts) {
    const vs = (this.versions.get(k) ?? []).filter(([t]) => t < ts);
    let acc;
    let since = 0;
    if (vs.length) {
      const [commit, base] = vs[vs.length - 1];
      since = this.resetStarts.get(k)?.get(commit) ?? commit;
      if (base !== undefined) {
        acc = spec.parse(base);
        if (acc === undefined) throw new PercolatorError('storage', `${k.replaceAll('\u0000', '/')} holds a value that is not ${spec.type}`);
      }
    }
    for (const [t, d] of this.deltas.get(k) ?? []) if (since < t && t < ts) acc = spec.fold(acc, d);
    return acc;
  }

  value(k, ts) {
    const spec = this.spec(k);
    if (!spec) return this.read(k, ts);
    const acc = this.fold(spec, k, ts);
    return acc === undefined ? undefined : spec.encode(acc);
  }

  // Declares a combined column, as the host's `[[combine]] table, column, op, type`: op sum,
  // min or max over type i64 or f64, or op set over type set.
  combineColumn(table, column, op, type) {
    const ok = ['sum', 'min', 'max', 'set'].includes(op) && ['i64', 'f64', 'set'].includes(type) && (op === 'set') === (type === 'set');
    if (!ok) {
      throw new PercolatorError(
        'invalid-argument',
        `combined column ${table}/${column}: op ${op} does not apply to type ${type} (sum, min and max take i64 or f64; set takes set)`,
      );
    }
    this.combined.set(`${table}\u0000${column}`, new Combined(op, type));
  }

  write(k, ts, value) {
    if (!this.versions.has(k)) this.versions.set(k, []);
    this.versions.get(k).push([ts, value]);
  }

  // Commits a write directly (as another client would); of a combined column, a reset that
  // discards every delta committed before it (the value must be of its type).
  put(table, row, column, value) {
    const k = key(table, row, column);
    const v = typeof value === 'string' ? encoder.encode(value) : value;
    const spec = this.spec(k);
    if (spec && spec.parse(v) === undefined) {
      throw new PercolatorError('invalid-argument', `${table}/${column} is combined (${spec.op} ${spec.type}): the value is not of its type`);
    }
    const ts = this.tick();
    this.write(k, ts, v);
    return ts;
  }

  remove(table, row, column) {
    const ts = this.tick();
    this.write(key(table, row, column), ts, undefined);
    return ts;
  }

  // The newest committed value (of a combined column: its folded total, as text).
  get(table, row, column) {
    return this.value(key(table, row, column), this.clock + 1);
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
    this.writes = new Map(); // of a combined cell: resets (a combine after one folds into it)
    this.deltas = new Map(); // this transaction's delta per combined cell it did not reset
    this.weak = [];
  }

  get(table, row, column) {
    const k = key(table, row, column);
    if (this.writes.has(k)) return this.writes.get(k);
    const spec = this.store.spec(k);
    if (!spec) return this.store.read(k, this.start);
    let acc = this.store.fold(spec, k, this.start);
    if (this.deltas.has(k)) acc = spec.fold(acc, this.deltas.get(k));
    return acc === undefined ? undefined : spec.encode(acc);
  }

  // This transaction's delta per combined cell (its combines folded), as text, by
  // `table/row/column` (the row as text).
  bufferedCombines() {
    const out = new Map();
    for (const [k, d] of this.deltas) {
      const c = unkey(k);
      out.set(`${c.table}/${show(c.row)}/${c.column}`, new TextDecoder().decode(this.store.spec(k).encode(d)));
    }
    return out;
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
      const c = unkey(k);
      if (c.table === table) cells.set(k, c);
    };
    for (const k of this.store.versions.keys()) note(k);
    for (const k of this.store.deltas.keys()) note(k);
    for (const k of this.writes.keys()) note(k);
    for (const k of this.deltas.keys()) note(k);
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
    const k = key(table, row, column);
    const spec = this.store.spec(k);
    if (spec) {
      // A reset: the value must be of the column's type; own deltas go.
      if (spec.parse(value) === undefined) {
        throw new PercolatorError(
          'invalid-argument',
          `set of the combined column ${table}/${column} of row ${JSON.stringify(show(row))}: the value is not a ${spec.type} value (i64: decimal digits; f64: a finite number; set: a JSON array of strings)`,
        );
      }
      this.deltas.delete(k);
    }
    this.writes.set(k, value);
  }

  delete(table, row, column) {
    this.writable(table, column);
    const k = key(table, row, column);
    this.deltas.delete(k);
    this.writes.set(k, undefined);
  }

  // Adds `delta` to a combined column at commit; never conflicts with other combines.
  combine(table, row, column, delta) {
    const d = toDelta(table, row, column, delta);
    this.writable(table, column);
    const k = key(table, row, column);
    const spec = this.store.spec(k);
    if (!spec) {
      throw new PercolatorError(
        'invalid-argument',
        `combine into ${table}/${column} of row ${JSON.stringify(show(row))}: the column is not declared combined (a [[combine]] in the configuration)`,
      );
    }
    const acc = spec.delta({ table, row: bytes(row), column }, d);
    if (this.writes.has(k)) {
      // After a reset in this transaction: folds into its value.
      const base = this.writes.get(k);
      this.writes.set(k, spec.encode(spec.fold(base === undefined ? undefined : spec.parse(base), acc)));
    } else {
      this.deltas.set(k, spec.fold(this.deltas.get(k), acc));
    }
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
    for (const [k, v] of this.writes) {
      if (this.store.spec(k)) {
        if (!this.store.resetStarts.has(k)) this.store.resetStarts.set(k, new Map());
        this.store.resetStarts.get(k).set(ts, this.start);
      }
      this.store.write(k, ts, v);
    }
    for (const [k, d] of this.deltas) {
      if (!this.store.deltas.has(k)) this.store.deltas.set(k, []);
      this.store.deltas.get(k).push([ts, d]);
    }
    return ts;
  }
}
