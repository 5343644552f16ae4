"""clustering, in Python: a port of the web index's Rust clustering observer
(guest-examples/webindex/src/observers/clustering.rs), writing the same cells with the same
bytes, so that `apps/webindex`'s incremental = batch check holds with it bound instead.

Pages with equal `doc:hash` form a cluster with one canonical URL (the highest PageRank, then
the smallest URL bytewise). Bind to `pages/doc:hash` and to `pages/raw:pagerank`, as
config/web-index.toml binds the Rust one (see the Rust file for why each write is made).
"""

import math

from percolator_guest import Cell, Failed, Notification, Txn, export

PAGES, CLUSTERS = "pages", "clusters"
DOC_HASH, CLUSTER_HASH, CLUSTER_CANONICAL = "doc:hash", "cluster:hash", "cluster:canonical"
RAW_PAGERANK, EXPORT_DIRTY = "raw:pagerank", "export:dirty"
MEMBER_PAGERANK, CANON_URL = "member:pagerank", "canon:url"
ABSENT_PAGERANK = "0"
PAGE = 10_000
HEX = set("0123456789abcdef")


def bad_cell(table: str, row: bytes, column: str, message: str) -> Failed:
    return Failed(f"{table}/{row.decode('utf-8', 'replace')}/{column}: {message}")


def text(table: str, row: bytes, column: str, value: bytes) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError as e:
        raise bad_cell(table, row, column, f"not UTF-8: {e}") from None


def decode_hash(table: str, row: bytes, column: str, value: str) -> str:
    if len(value) == 32 and set(value) <= HEX:
        return value
    raise bad_cell(table, row, column, f"{value!r} is not a content hash (32 lowercase hex digits)")


def parse_pagerank(value: str) -> float:
    """As the Rust `parse_pagerank`: a finite, non-negative decimal number (surrounding
    whitespace allowed); -0 is 0."""
    t = value.strip()
    if not t or "_" in t or t.lower().lstrip("+-") in ("inf", "infinity", "nan"):
        raise ValueError(f"{value!r} is not a number")
    try:
        v = float(t)
    except ValueError:
        raise ValueError(f"{value!r} is not a number") from None
    if not math.isfinite(v):
        raise ValueError(f"{value!r} is not a finite number")
    if v < 0:
        raise ValueError(f"{value!r} is negative")
    return v + 0.0


def join_row(a: str, b: str) -> bytes:
    return a.encode() + b" " + b.encode()


def scan_prefix(txn: Txn, table: str, prefix: str, column: str):
    start, end = prefix.encode() + b" ", prefix.encode() + b"!"
    out = []
    while True:
        page = txn.scan(table, start, end, [column], PAGE)
        if not page:
            return out
        start = page[-1].row + b"\0"
        for entry in page:
            suffix = entry.row[len(prefix) + 1:]
            try:
                suffix = suffix.decode("utf-8")
            except UnicodeDecodeError:
                raise bad_cell(table, entry.row, column, "the row key is not UTF-8") from None
            out.append((suffix, text(table, entry.row, column, entry.value)))


def settle(txn: Txn, h: str) -> None:
    members = scan_prefix(txn, CLUSTERS, h, MEMBER_PAGERANK)
    best = None
    for url, pagerank in members:
        try:
            rank = parse_pagerank(pagerank)
        except ValueError as e:
            raise bad_cell(CLUSTERS, join_row(h, url), MEMBER_PAGERANK, str(e)) from None
        # Higher PageRank first, then the smaller URL bytewise.
        if best is None or (-rank, url.encode()) < (-best[1], best[0].encode()):
            best = (url, rank)
    if best is None:
        txn.delete(CLUSTERS, h.encode(), CANON_URL)
        return
    canonical = best[0]
    txn.set_str(CLUSTERS, h.encode(), CANON_URL, canonical)
    cells = [Cell(PAGES, url.encode(), CLUSTER_CANONICAL) for url, _ in members]
    current = []
    for i in range(0, len(cells), PAGE):
        current.extend(txn.get_many(cells[i:i + PAGE]))
    for (url, _), value in zip(members, current):
        if value != canonical.encode():
            txn.set_str(PAGES, url.encode(), CLUSTER_CANONICAL, canonical)
            txn.notify_weak(PAGES, url.encode(), EXPORT_DIRTY)


def observe(txn: Txn, n: Notification) -> None:
    row = n.row
    try:
        url = row.decode("utf-8")
    except UnicodeDecodeError:
        raise Failed(f"{n.table}/{row.decode('utf-8', 'replace')}/{n.column}: the row key is not UTF-8") from None
    columns = [DOC_HASH, CLUSTER_HASH, RAW_PAGERANK, CLUSTER_CANONICAL]
    values = txn.get_many([Cell(PAGES, row, c) for c in columns])
    h, registered, pagerank, canonical = (
        None if v is None else text(PAGES, row, c, v) for v, c in zip(values, columns)
    )
    h = None if h is None else decode_hash(PAGES, row, DOC_HASH, h)
    registered = None if registered is None else decode_hash(PAGES, row, CLUSTER_HASH, registered)
    if pagerank is not None:
        try:
            parse_pagerank(pagerank)
        except ValueError as e:
            raise bad_cell(PAGES, row, RAW_PAGERANK, str(e)) from None

    if registered is not None and registered != h:
        txn.delete(CLUSTERS, join_row(registered, url), MEMBER_PAGERANK)
        settle(txn, registered)
    if h is not None:
        member = join_row(h, url)
        pr = ABSENT_PAGERANK if pagerank is None else pagerank
        if txn.get(CLUSTERS, member, MEMBER_PAGERANK) != pr.encode():
            txn.set_str(CLUSTERS, member, MEMBER_PAGERANK, pr)
        txn.set_str(PAGES, row, CLUSTER_HASH, h)
        settle(txn, h)
    else:
        txn.delete(PAGES, row, CLUSTER_HASH)
        if canonical is not None:
            txn.delete(PAGES, row, CLUSTER_CANONICAL)
            txn.notify_weak(PAGES, row, EXPORT_DIRTY)


try:
    WitWorld = export(observe)
except ImportError:
    pass
