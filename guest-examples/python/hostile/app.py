"""hostile, in Python: one component that misbehaves as its binding's `mode` parameter says,
for the host's sandbox tests. Every mode writes what it saw to `out:<mode>` when it can.

- `spin`: loops forever (the deadline stops it);
- `bomb`: allocates without end (the memory limit stops it);
- `file`: opens /etc/passwd (no folder is preopened: it fails);
- `socket`: connects to 127.0.0.1 (sockets are refused);
- `env`: writes the environment and the arguments it sees (both empty);
- `clock`: writes the wall-clock time and 8 random bytes (fixed and seeded by the binding);
- `raise`: divides by zero (the exception's message reaches the dead letter);
- `combine`: combines deltas of every kind into `sum:i` (sum i64), `sum:f` (sum f64) and
  `set:s` (set), then three of the wrong kind (a float into `sum:i`, an int into the
  uncombined `out:combine`, a str), each refused with InvalidArgument; writes the total it
  reads and the kinds of the refusals.
"""

import json
import os
import sys
import time

from percolator_guest import Error, Notification, Txn, export


def observe(txn: Txn, n: Notification) -> None:
    mode = txn.param("mode")
    out = f"out:{mode}"
    if mode == "spin":
        while True:
            pass
    elif mode == "bomb":
        hoard = []
        while True:
            hoard.append(bytearray(1 << 20))
    elif mode == "file":
        with open("/etc/passwd") as f:
            txn.set_str(n.table, n.row, out, f.read())
    elif mode == "socket":
        import socket

        s = socket.create_connection(("127.0.0.1", 7878), timeout=1)
        txn.set_str(n.table, n.row, out, f"connected: {s}")
    elif mode == "env":
        txn.set_str(n.table, n.row, out, json.dumps({"environ": dict(os.environ), "argv": sys.argv[1:]}))
    elif mode == "clock":
        txn.set_str(n.table, n.row, out, json.dumps({"time": time.time(), "random": os.urandom(8).hex()}))
    elif mode == "raise":
        print("about to divide", file=sys.stderr)
        txn.set_str(n.table, n.row, out, str(1 / 0))
    elif mode == "combine":
        txn.combine(n.table, n.row, "sum:i", 2)
        txn.combine(n.table, n.row, "sum:i", 3)
        txn.combine(n.table, n.row, "sum:f", 1.5)
        txn.combine(n.table, n.row, "sum:f", 1)
        txn.combine(n.table, n.row, "set:s", ["b", "a"])
        txn.combine(n.table, n.row, "set:s", {"c"})
        seen = [f"read {txn.get_str(n.table, n.row, 'sum:i')}"]
        for column, delta in [("sum:i", 0.5), (out, 1), ("sum:i", "seven")]:
            try:
                txn.combine(n.table, n.row, column, delta)
                seen.append("accepted")
            except Error as e:
                seen.append(e.kind)
        txn.set_str(n.table, n.row, out, "; ".join(seen))
    else:
        raise ValueError(f"unknown mode {mode!r}")


try:
    WitWorld = export(observe)
except ImportError:
    pass
