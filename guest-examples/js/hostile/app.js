// hostile, in JavaScript: one component that misbehaves as its binding's `mode` parameter says,
// for the host's sandbox tests.
//
// - `spin`: loops forever (the deadline stops it);
// - `bomb`: allocates without end (the memory limit stops it);
// - `fetch`: calls fetch() (the build leaves out wasi:http: the runtime aborts, a trap);
// - `throw`: reads a property of null (the TypeError's message reaches the dead letter).

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
  } else {
    throw new Error(`unknown mode ${mode}`);
  }
}
