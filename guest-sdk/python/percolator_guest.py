"""percolator_guest: write a percolator observer in Python (componentize-py).

One file, vendored into a project by ``percolator new NAME --lang python``. An observer is a
function ``observe(txn, notification)``; ``export(observe)`` makes the class componentize-py
exports for the world ``percolator:observer@0.3.0``::

    from percolator_guest import export

    def observe(txn, n):
        text = txn.get_str(n.table, n.row, n.column)
        target = txn.param("target") or "derived:upper"
        if text is None:
            txn.delete(n.table, n.row, target)
        else:
            txn.set_str(n.table, n.row, target, text.upper())

    WitWorld = export(observe)

Inside the component ``txn`` is backed by the host's ``txn`` and ``config`` imports; natively
(unit tests, plain CPython) use ``MemStore``, which has the host's semantics: snapshot reads
with the transaction's own writes, commit-time write-write conflicts, declared writes, weak
columns and parameters. Integers are 8 bytes big-endian, as in the Rust SDK.

Errors mirror the WIT ``error`` variant: ``Conflict`` (return it unchanged: the host retries
the run with a new snapshot), ``NotFound``, ``Denied``, ``InvalidArgument``, ``Storage`` and
``Failed``. Any other exception raised by an observer becomes ``Failed`` with its type and
message (``ZeroDivisionError: division by zero``), so the dead letter says what happened.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Optional, Tuple


class Error(Exception):
    """An error of the WIT ``error`` variant; ``kind`` names the case."""

    kind = "failed"

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class Conflict(Error):
    """The transaction lost a race; the host retries the run. Return it unchanged."""

    kind = "conflict"


class NotFound(Error):
    kind = "not-found"


class Denied(Error):
    """The binding does not declare this access."""

    kind = "denied"


class InvalidArgument(Error):
    kind = "invalid-argument"


class Storage(Error):
    kind = "storage"


class Failed(Error):
    """The observer's own failure; counts towards dead-lettering."""

    kind = "failed"


_BY_KIND = {c.kind: c for c in (Conflict, NotFound, Denied, InvalidArgument, Storage, Failed)}


@dataclass(frozen=True, order=True)
class Cell:
    table: str
    row: bytes
    column: str


@dataclass(frozen=True)
class Notification:
    """What changed: the argument of every run."""

    cell: Cell
    weak: bool = False
    commit_ts: Optional[int] = None
    attempt: int = 1

    @property
    def table(self) -> str:
        return self.cell.table

    @property
    def row(self) -> bytes:
        return self.cell.row

    @property
    def column(self) -> str:
        return self.cell.column


@dataclass(frozen=True)
class ScanEntry:
    row: bytes
    column: str
    value: bytes


def _b(row) -> bytes:
    return row.encode() if isinstance(row, str) else bytes(row)


class Txn:
    """The running transaction. Subclasses provide the raw operations; the typed helpers are
    shared."""

    def get(self, table: str, row, column: str) -> Optional[bytes]:
        raise NotImplementedError

    def get_many(self, cells: Iterable[Cell]) -> List[Optional[bytes]]:
        return [self.get(c.table, c.row, c.column) for c in cells]

    def scan(self, table: str, start=b"", end=None, columns: Optional[List[str]] = None, limit: int = 1000) -> List[ScanEntry]:
        raise NotImplementedError

    def set(self, table: str, row, column: str, value: bytes) -> None:
        raise NotImplementedError

    def delete(self, table: str, row, column: str) -> None:
        raise NotImplementedError

    def notify_weak(self, table: str, row, column: str) -> None:
        raise NotImplementedError

    def start_ts(self) -> int:
        raise NotImplementedError

    def param(self, key: str) -> Optional[str]:
        """The binding's parameter ``key`` (``[binding.params]``), or None."""
        raise NotImplementedError

    def params(self) -> List[Tuple[str, str]]:
        """Every parameter of the binding, sorted by key."""
        raise NotImplementedError

    # Typed helpers (the Rust SDK's encodings).
    def get_str(self, table: str, row, column: str) -> Optional[str]:
        v = self.get(table, row, column)
        if v is None:
            return None
        try:
            return v.decode("utf-8")
        except UnicodeDecodeError:
            raise Failed(f"{table}/{_b(row).decode('utf-8', 'replace')}/{column} is not UTF-8") from None

    def set_str(self, table: str, row, column: str, value: str) -> None:
        self.set(table, row, column, value.encode("utf-8"))

    def get_u64(self, table: str, row, column: str) -> Optional[int]:
        v = self.get(table, row, column)
        if v is None:
            return None
        if len(v) != 8:
            raise Failed(f"{table}/{_b(row).decode('utf-8', 'replace')}/{column} is {len(v)} bytes, not a u64 (8)")
        return int.from_bytes(v, "big")

    def set_u64(self, table: str, row, column: str, value: int) -> None:
        if not 0 <= value < 1 << 64:
            raise InvalidArgument(f"{value} is not a u64")
        self.set(table, row, column, value.to_bytes(8, "big"))

    def add_u64(self, table: str, row, column: str, delta: int) -> int:
        value = (self.get_u64(table, row, column) or 0) + delta
        self.set_u64(table, row, column, value)
        return value


def _guard(observe: Callable[[Txn, Notification], None], txn: Txn, n: Notification) -> Optional[Error]:
    """Runs the observer; an SDK error as is, any other exception as Failed."""
    try:
        observe(txn, n)
        return None
    except Error as e:
        return e
    except Exception as e:  # noqa: BLE001 - every exception becomes the run's error
        traceback.print_exc()  # stderr: the host logs it
        return Failed(f"{type(e).__name__}: {e}")


# ---- inside the component ----------------------------------------------------------------


class HostTxn(Txn):
    """The host's transaction, through the WIT imports (only inside the component)."""

    def __init__(self, txn, config):
        # The modules of the imports, imported by `export` while componentize-py
        # pre-initialises the app: an interface not imported then is not in the component.
        self._txn, self._config = txn, config

    def _call(self, f, *args):
        from componentize_py_types import Err  # noqa: PLC0415

        try:
            return f(*args)
        except Err as e:
            kind = type(e.value).__name__.removeprefix("Error_")
            cls = {"Conflict": Conflict, "NotFound": NotFound, "Denied": Denied,
                   "InvalidArgument": InvalidArgument, "Storage": Storage}.get(kind, Failed)
            raise cls(e.value.value) from None

    def get(self, table, row, column):
        return self._call(self._txn.get, table, _b(row), column)

    def get_many(self, cells):
        from wit_world.imports import types  # noqa: PLC0415 - loaded by `export` already

        wit = [types.Cell(c.table, _b(c.row), c.column) for c in cells]
        return self._call(self._txn.get_many, wit)

    def scan(self, table, start=b"", end=None, columns=None, limit=1000):
        entries = self._call(self._txn.scan, table, _b(start), None if end is None else _b(end), columns, limit)
        return [ScanEntry(e.row, e.column, e.value) for e in entries]

    def set(self, table, row, column, value):
        self._call(self._txn.set, table, _b(row), column, bytes(value))

    def delete(self, table, row, column):
        self._call(self._txn.delete, table, _b(row), column)

    def notify_weak(self, table, row, column):
        self._call(self._txn.notify_weak, table, _b(row), column)

    def start_ts(self):
        return self._txn.start_ts()

    def param(self, key):
        return self._config.get(key)

    def params(self):
        return list(self._config.all())


def export(observe: Callable[[Txn, Notification], None]):
    """The class componentize-py exports (assign it to ``WitWorld`` in the app module)."""
    import wit_world  # noqa: PLC0415 - only in the component
    from componentize_py_types import Err  # noqa: PLC0415
    from wit_world.imports import config, txn, types  # noqa: PLC0415

    wit_errors = {
        "conflict": types.Error_Conflict, "not-found": types.Error_NotFound, "denied": types.Error_Denied,
        "invalid-argument": types.Error_InvalidArgument, "storage": types.Error_Storage, "failed": types.Error_Failed,
    }

    class Exported(wit_world.WitWorld):
        def observe(self, wn) -> None:
            n = Notification(Cell(wn.cell.table, wn.cell.row, wn.cell.column), wn.weak, wn.commit_ts, wn.attempt)
            error = _guard(observe, HostTxn(txn, config), n)
            if error is not None:
                raise Err(wit_errors[error.kind](error.message))

    return Exported


def log(level: str, message: str) -> None:
    """Logs into the host's tracing output at ``trace``, ``debug``, ``info``, ``warn`` or
    ``error`` (natively: to stderr)."""
    try:
        from wit_world.imports import log as wit_log  # noqa: PLC0415
    except ImportError:
        import sys  # noqa: PLC0415

        print(f"{level}: {message}", file=sys.stderr)
        return
    wit_log.log(getattr(wit_log.Level, level.upper()), message)


# ---- natively: the in-memory store --------------------------------------------------------

_MAX_NAME = 255
_MAX_ROW = 4096


def _check(table: str, row: bytes, column: str) -> None:
    if not table or len(table.encode()) > _MAX_NAME or not column or len(column.encode()) > _MAX_NAME:
        raise InvalidArgument(f"bad table or column name: {table!r}/{column!r}")
    if not row or len(row) > _MAX_ROW:
        raise InvalidArgument(f"a row key is 1..={_MAX_ROW} bytes, not {len(row)}")
    if column.startswith("__"):
        raise InvalidArgument(f"column {column} is reserved")


@dataclass
class MemStore:
    """A multi-version in-memory store with the host's semantics, for unit tests."""

    versions: Dict[Cell, Dict[int, Optional[bytes]]] = field(default_factory=dict)
    clock: int = 0
    weak_sent: List[Cell] = field(default_factory=list)
    declared_writes: Optional[set] = None
    weak_columns: set = field(default_factory=set)
    parameters: Dict[str, str] = field(default_factory=dict)

    def _tick(self) -> int:
        self.clock += 1
        return self.clock

    def _read(self, cell: Cell, ts: int) -> Optional[bytes]:
        older = [t for t in self.versions.get(cell, {}) if t < ts]
        return self.versions[cell][max(older)] if older else None

    def put(self, table: str, row, column: str, value) -> int:
        """Commits a write directly (as another client would)."""
        ts = self._tick()
        value = value.encode() if isinstance(value, str) else bytes(value)
        self.versions.setdefault(Cell(table, _b(row), column), {})[ts] = value
        return ts

    def remove(self, table: str, row, column: str) -> int:
        ts = self._tick()
        self.versions.setdefault(Cell(table, _b(row), column), {})[ts] = None
        return ts

    def get(self, table: str, row, column: str) -> Optional[bytes]:
        return self._read(Cell(table, _b(row), column), self.clock + 1)

    def get_str(self, table: str, row, column: str) -> Optional[str]:
        v = self.get(table, row, column)
        return None if v is None else v.decode()

    def declare_writes(self, table: str, columns: Iterable[str]) -> None:
        """Only these columns (with every earlier declaration) may be written by transactions."""
        self.declared_writes = (self.declared_writes or set()) | {(table, c) for c in columns}

    def bind_weak(self, table: str, column: str) -> None:
        self.weak_columns.add((table, column))

    def set_param(self, key: str, value) -> None:
        self.parameters[key] = str(value).lower() if isinstance(value, bool) else str(value)

    def notification(self, table: str, row, column: str) -> Notification:
        return Notification(Cell(table, _b(row), column), False, None, 1)

    def begin(self) -> "MemTxn":
        return MemTxn(self, self._tick())

    def observe(self, observe: Callable[[Txn, Notification], None], n: Notification) -> int:
        """Runs an observer the way the host does (one attempt): committed only if it
        succeeds; its error (an SDK error, or Failed for any other exception) is raised."""
        txn = self.begin()
        error = _guard(observe, txn, n)
        if error is not None:
            raise error
        return txn.commit()


class MemTxn(Txn):
    """A transaction of a MemStore: snapshot reads, buffered writes, commit-time conflicts."""

    def __init__(self, store: MemStore, start: int):
        self.store, self.start = store, start
        self.writes: Dict[Cell, Optional[bytes]] = {}
        self.weak: set = set()

    def get(self, table, row, column):
        cell = Cell(table, _b(row), column)
        _check(table, cell.row, column)
        if cell in self.writes:
            return self.writes[cell]
        return self.store._read(cell, self.start)

    def scan(self, table, start=b"", end=None, columns=None, limit=1000):
        start, end = _b(start), None if end is None else _b(end)
        if columns is not None and not columns:
            raise InvalidArgument("an empty column filter")
        cells = {c for c in self.store.versions if c.table == table} | {c for c in self.writes if c.table == table}
        out = []
        for c in sorted(cells):
            if c.row < start or (end is not None and c.row >= end) or c.column.startswith("__"):
                continue
            if columns is not None and c.column not in columns:
                continue
            v = self.get(c.table, c.row, c.column)
            if v is not None:
                out.append(ScanEntry(c.row, c.column, v))
            if len(out) >= min(limit, 10_000):
                break
        return out

    def _writable(self, table, column):
        if (table, column) in self.store.weak_columns:
            raise InvalidArgument(f"column {table}/{column} is bound to a weak-notify observer: it can be notified, not written")
        if self.store.declared_writes is not None and (table, column) not in self.store.declared_writes:
            raise Denied(f"the binding does not declare a write to {table}/{column}")

    def set(self, table, row, column, value):
        _check(table, _b(row), column)
        self._writable(table, column)
        self.writes[Cell(table, _b(row), column)] = bytes(value)

    def delete(self, table, row, column):
        _check(table, _b(row), column)
        self._writable(table, column)
        self.writes[Cell(table, _b(row), column)] = None

    def notify_weak(self, table, row, column):
        _check(table, _b(row), column)
        if (table, column) not in self.store.weak_columns:
            raise InvalidArgument(f"column {table}/{column} is not a weak-notify column")
        self.weak.add(Cell(table, _b(row), column))

    def start_ts(self):
        return self.start

    def param(self, key):
        return self.store.parameters.get(key)

    def params(self):
        return sorted(self.store.parameters.items())

    def commit(self) -> int:
        for cell in self.writes:
            newest = max(self.store.versions.get(cell, {0: None}))
            if newest > self.start:
                raise Conflict(f"{cell.table}/{cell.row!r}/{cell.column} was written at {newest}, after {self.start}")
        ts = self.store._tick()
        for cell, value in self.writes.items():
            self.store.versions.setdefault(cell, {})[ts] = value
        self.store.weak_sent.extend(sorted(self.weak))
        return ts
