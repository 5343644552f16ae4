"""uppercase, in Python: the Rust guest-examples/uppercase, line for line.

Bind it to `raw:text`: it writes the upper-cased text to `derived:upper` of the same row (or
to the column its binding's `target` parameter names), and deletes it when `raw:text` is gone.
A value that is not UTF-8 fails the run.
"""

from percolator_guest import Notification, Txn, export

SOURCE = "raw:text"
TARGET = "derived:upper"


def observe(txn: Txn, n: Notification) -> None:
    target = txn.param("target") or TARGET
    text = txn.get_str(n.table, n.row, SOURCE)
    if text is None:
        txn.delete(n.table, n.row, target)
    else:
        txn.set_str(n.table, n.row, target, text.upper())


try:
    WitWorld = export(observe)
except ImportError:  # natively (tests): no component world to export to
    pass
