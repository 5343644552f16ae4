"""tag-count, in Python: how many documents carry each tag, in a combined column.

Bind it strongly to `docs/doc:tags` (a document's tags, comma-separated: `"rust, wasm"`;
spaces around a tag are dropped, empty tags and tags over MAX_TAG_LEN bytes ignored, a tag
repeated in one document counts once). For each tag a document gained it combines +1, for each
it lost −1, into `tags/<tag>/count:n`, a combined column (`[[combine]] op = "sum", type =
"i64"`): combines never conflict, so documents sharing a popular tag all commit at once. What
it counted for the document is kept in `docs/tc:counted` (a JSON array of its tags, sorted),
written on every run: two runs on one document conflict there, so each change of a document's
tags is counted once, and the next change subtracts exactly what was added. A tag no document
carries any more reads `0`. config/tag-count.toml binds it.
"""

import json

from percolator_guest import Failed, Notification, Txn, export

TAGS = "doc:tags"
COUNTED = "tc:counted"
TAG_TABLE = "tags"
COUNT = "count:n"
# Longest counted tag, in bytes (a tag is a row key).
MAX_TAG_LEN = 200


def parse_tags(text: str) -> set:
    """The distinct tags of a `doc:tags` value."""
    tags = (t.strip() for t in text.split(","))
    return {t for t in tags if t and len(t.encode("utf-8")) <= MAX_TAG_LEN}


def observe(txn: Txn, n: Notification) -> None:
    if n.column != TAGS:
        raise Failed(f"tag-count is bound to {n.table}/{n.column}; bind it to {TAGS}")
    text = txn.get_str(n.table, n.row, TAGS)
    new = parse_tags(text or "")
    counted = txn.get_str(n.table, n.row, COUNTED)
    try:
        old = set(json.loads(counted)) if counted is not None else set()
    except ValueError as e:
        raise Failed(f"{n.table}/{n.row.decode('utf-8', 'replace')}/{COUNTED}: not a JSON array: {e}") from None
    for tag in sorted(new - old):
        txn.combine(TAG_TABLE, tag, COUNT, 1)
    for tag in sorted(old - new):
        txn.combine(TAG_TABLE, tag, COUNT, -1)
    # Always written (even unchanged): a concurrent run on this document conflicts here.
    if new:
        txn.set_str(n.table, n.row, COUNTED, json.dumps(sorted(new), ensure_ascii=False))
    else:
        txn.delete(n.table, n.row, COUNTED)


try:
    WitWorld = export(observe)
except ImportError:  # natively (tests): no component world to export to
    pass
