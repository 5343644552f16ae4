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
columns, combined columns and parameters. Integers are 8 bytes big-endian, as in the Rust SDK.

Combined columns (a ``[[combine]]`` of the host's configuration; ``MemStore.combine_column``
natively) are added to with ``txn.combine(table, row, column, delta)``: a Python ``int`` is an
integer delta, a ``float`` a float one, a list, tuple, set or frozenset of ``str`` set members.
Combines never conflict with each other; reads return the folded total as text (``"42"``,
``"2.5"``, ``'["a","b"]'``); ``set``/``delete`` of the column reset it.

Errors mirror the WIT ``error`` variant: ``Conflict`` (return it unchanged: the host retries
the run with a new snapshot), ``NotFound``, ``Denied``, ``InvalidArgument``, ``Storage`` and
``Failed``. Any other exception raised by an observer becomes ``Failed`` with its type and
message (``ZeroDivisionError: division by zero``), so the dead letter says what happened.
"""

from __future__ import annotations

import json
import math
import re
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


_I64 = (-(1 << 63), (1 << 63) - 1)


def _delta(table: str, row, column: str, delta) -> Tuple[str, object]:
    """The kind of a combine's ``delta`` and its value: ``("int", int)``, ``("float",
    float)`` or ``("members", [str])``; anything else is InvalidArgument."""
    where = f"combine into {table}/{column} of row {_b(row).decode('utf-8', 'replace')!r}"
    if isinstance(delta, bool):
        raise InvalidArgument(f"{where}: a bool is not a delta (use 1 or 0)")
    if isinstance(delta, int):
        if not _I64[0] <= delta <= _I64[1]:
            raise InvalidArgument(f"{where}: the delta {delta} is outside the 64-bit signed range")
        return "int", delta
    if isinstance(delta, float):
        return "float", delta
    if isinstance(delta, (list, tuple, set, frozenset)):
        members = list(delta)
        bad = [m for m in members if not isinstance(m, str)]
        if bad:
            raise InvalidArgument(f"{where}: set members must be str, not {type(bad[0]).__name__} ({bad[0]!r})")
        return "members", members
    raise InvalidArgument(
        f"{where}: a delta is an int, a float or a list/tuple/set of str, not {type(delta).__name__}"
    )


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

    def combine(self, table: str, row, column: str, delta) -> None:
        """Adds ``delta`` to a combined column at commit: an ``int`` (i64 columns, and f64
        ones), a finite ``float`` (f64 columns), or a list/tuple/set of ``str`` (set
        columns). Never conflicts with other combines; reads of the column return the folded
        total as text, this transaction's own deltas included. InvalidArgument for a column
        that is not combined or a delta of the wrong kind."""
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

    def combine(self, table, row, column, delta):
        from wit_world.imports import types  # noqa: PLC0415 - loaded by `export` already

        kind, value = _delta(table, row, column, delta)
        wit = {"int": types.Delta_Int, "float": types.Delta_Float, "members": types.Delta_Members}[kind](value)
        self._call(self._txn.combine, table, _b(row), column, wit)

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

_OPS = ("sum", "min", "max", "set")
_TYPES = ("i64", "f64", "set")
_INT_TEXT = re.compile(r"[+-]?[0-9]+")
_FLOAT_TEXT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?(?:inf|infinity|nan)", re.IGNORECASE)


def _format_f64(f: float) -> str:
    """Rust's ``{:?}`` of an f64 (the store's text): Python's repr has the same digits and the
    same switch to an exponent (below 1e-4, from 1e16), written ``1e16`` instead of ``1e+16``."""
    text = repr(f)
    if "e" in text:
        mantissa, exp = text.split("e")
        text = f"{mantissa}e{int(exp)}"
    return text


@dataclass(frozen=True)
class _Combined:
    """A combined column's op and type, with the store's parsing, text and folding."""

    op: str
    type: str

    def delta(self, cell: Cell, kind: str, value):
        if self.type == "i64" and kind == "int":
            return value
        if self.type == "f64" and kind == "int":
            return float(value)
        if self.type == "f64" and kind == "float":
            if not math.isfinite(value):
                raise self._wrong(cell, f"the delta {value} is not a finite number")
            return value
        if self.type == "set" and kind == "members":
            return frozenset(value)
        what = {"int": "an integer delta", "float": "a float delta", "members": "set members"}[kind]
        raise self._wrong(cell, f"{what}, but the column holds {self.type} ({self.op})")

    def _wrong(self, cell: Cell, what: str) -> InvalidArgument:
        row = cell.row.decode("utf-8", "replace")
        return InvalidArgument(f"combine into {cell.table}/{cell.column} of row {row!r}: {what}")

    def parse(self, value: bytes):
        """The stored text as a value of the type, or None if it is not one."""
        try:
            text = value.decode("utf-8")
        except UnicodeDecodeError:
            return None
        if self.type == "i64":
            if _INT_TEXT.fullmatch(text) and _I64[0] <= int(text) <= _I64[1]:
                return int(text)
            return None
        if self.type == "f64":
            if not _FLOAT_TEXT.fullmatch(text):
                return None
            f = float(text)
            return f if math.isfinite(f) else None
        try:
            members = json.loads(text)
        except ValueError:
            return None
        if not isinstance(members, list) or not all(isinstance(m, str) for m in members):
            return None
        return frozenset(members)

    def encode(self, acc) -> bytes:
        if self.type == "i64":
            return str(acc).encode()
        if self.type == "f64":
            return _format_f64(acc).encode()
        members = sorted(acc, key=lambda m: m.encode("utf-8", "surrogatepass"))
        return json.dumps(members, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass")

    def fold(self, acc, delta):
        if acc is None:
            return delta
        if self.op == "sum":
            if self.type == "i64":
                return min(max(acc + delta, _I64[0]), _I64[1])  # saturates at each step
            return acc + delta
        if self.op == "min":
            return min(acc, delta)
        if self.op == "max":
            return max(acc, delta)
        return acc | delta


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
    # Combined columns: (table, column) -> _Combined.
    combined: Dict[Tuple[str, str], _Combined] = field(default_factory=dict)
    # Deltas committed to combined cells: cell -> {commit ts: delta}. Apart from `versions`,
    # which holds only their bases (resets), so that combines never conflict.
    deltas: Dict[Cell, Dict[int, object]] = field(default_factory=dict)
    # The start ts of each reset of a combined cell, by its commit ts: the reset discarded
    # the deltas committed below its start; those above apply on top.
    reset_starts: Dict[Cell, Dict[int, int]] = field(default_factory=dict)

    def _tick(self) -> int:
        self.clock += 1
        return self.clock

    def _read(self, cell: Cell, ts: int) -> Optional[bytes]:
        older = [t for t in self.versions.get(cell, {}) if t < ts]
        return self.versions[cell][max(older)] if older else None

    def _spec(self, cell: Cell) -> Optional[_Combined]:
        return self.combined.get((cell.table, cell.column))

    def _fold(self, spec: _Combined, cell: Cell, ts: int):
        """A combined cell's total before ``ts``: the last reset's value folded, in commit
        order, with every delta committed after that reset's start (None: nothing)."""
        older = [t for t in self.versions.get(cell, {}) if t < ts]
        acc, since = None, 0
        if older:
            commit = max(older)
            since = self.reset_starts.get(cell, {}).get(commit, commit)
            base = self.versions[cell][commit]
            if base is not None:
                acc = spec.parse(base)
                if acc is None:
                    raise Storage(f"{cell.table}/{cell.row!r}/{cell.column} holds {base!r}, not a {spec.type} value")
        for t in sorted(self.deltas.get(cell, {})):
            if since < t < ts:
                acc = spec.fold(acc, self.deltas[cell][t])
        return acc

    def _value(self, cell: Cell, ts: int) -> Optional[bytes]:
        spec = self._spec(cell)
        if spec is None:
            return self._read(cell, ts)
        acc = self._fold(spec, cell, ts)
        return None if acc is None else spec.encode(acc)

    def combine_column(self, table: str, column: str, op: str, type: str) -> None:  # noqa: A002 - the TOML's key
        """Declares a combined column, as the host's ``[[combine]] table, column, op, type``:
        op ``sum``, ``min`` or ``max`` over type ``i64`` or ``f64``, or op ``set`` over type
        ``set``."""
        if op not in _OPS or type not in _TYPES or (op == "set") != (type == "set"):
            raise InvalidArgument(
                f"combined column {table}/{column}: op {op} does not apply to type {type} (sum, min and max take "
                "i64 or f64; set takes set)"
            )
        _check(table, b"r", column)
        self.combined[(table, column)] = _Combined(op, type)

    def put(self, table: str, row, column: str, value) -> int:
        """Commits a write directly (as another client would); of a combined column, a reset
        that discards every delta committed before it (the value must be of its type)."""
        value = value.encode() if isinstance(value, str) else bytes(value)
        cell = Cell(table, _b(row), column)
        spec = self._spec(cell)
        if spec is not None and spec.parse(value) is None:
            raise InvalidArgument(f"{table}/{column} is combined ({spec.op} {spec.type}): {value!r} is not of its type")
        ts = self._tick()
        self.versions.setdefault(cell, {})[ts] = value
        return ts

    def remove(self, table: str, row, column: str) -> int:
        ts = self._tick()
        self.versions.setdefault(Cell(table, _b(row), column), {})[ts] = None
        return ts

    def get(self, table: str, row, column: str) -> Optional[bytes]:
        """The newest committed value (of a combined column: its folded total, as text)."""
        return self._value(Cell(table, _b(row), column), self.clock + 1)

    def cells(self, table: str) -> List[Tuple[Cell, bytes]]:
        """Every cell of ``table`` with its newest value (combined ones folded), in key order."""
        cells = sorted({c for c in self.versions if c.table == table} | {c for c in self.deltas if c.table == table})
        return [(c, v) for c in cells if (v := self._value(c, self.clock + 1)) is not None]

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
        # Writes and deletes; of a combined cell, resets (a combine after one folds into it).
        self.writes: Dict[Cell, Optional[bytes]] = {}
        # This transaction's delta per combined cell it did not reset.
        self.deltas: Dict[Cell, object] = {}
        self.weak: set = set()

    def get(self, table, row, column):
        cell = Cell(table, _b(row), column)
        _check(table, cell.row, column)
        if cell in self.writes:
            return self.writes[cell]
        spec = self.store._spec(cell)
        if spec is None:
            return self.store._read(cell, self.start)
        acc = self.store._fold(spec, cell, self.start)
        if cell in self.deltas:
            acc = spec.fold(acc, self.deltas[cell])
        return None if acc is None else spec.encode(acc)

    def buffered_combines(self) -> Dict[Cell, bytes]:
        """This transaction's delta per combined cell (its combines folded), as text."""
        return {c: self.store._spec(c).encode(d) for c, d in self.deltas.items()}

    def scan(self, table, start=b"", end=None, columns=None, limit=1000):
        start, end = _b(start), None if end is None else _b(end)
        if columns is not None and not columns:
            raise InvalidArgument("an empty column filter")
        cells = {c for c in self.store.versions if c.table == table} | {c for c in self.writes if c.table == table}
        cells |= {c for c in self.store.deltas if c.table == table} | {c for c in self.deltas if c.table == table}
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
        cell = Cell(table, _b(row), column)
        spec = self.store._spec(cell)
        if spec is not None:
            # A reset: the value must be of the column's type; own deltas go.
            if spec.parse(bytes(value)) is None:
                raise InvalidArgument(
                    f"set of the combined column {table}/{column} of row {cell.row.decode('utf-8', 'replace')!r}: "
                    f"{bytes(value)!r} is not a {spec.type} value (i64: decimal digits; f64: a finite number; "
                    "set: a JSON array of strings)"
                )
            self.deltas.pop(cell, None)
        self.writes[cell] = bytes(value)

    def delete(self, table, row, column):
        _check(table, _b(row), column)
        self._writable(table, column)
        cell = Cell(table, _b(row), column)
        self.deltas.pop(cell, None)
        self.writes[cell] = None

    def combine(self, table, row, column, delta):
        kind, value = _delta(table, row, column, delta)
        cell = Cell(table, _b(row), column)
        _check(table, cell.row, column)
        self._writable(table, column)
        spec = self.store._spec(cell)
        if spec is None:
            raise InvalidArgument(
                f"combine into {table}/{column} of row {cell.row.decode('utf-8', 'replace')!r}: the column is not "
                "declared combined (a [[combine]] in the configuration)"
            )
        acc = spec.delta(cell, kind, value)
        if cell in self.writes:  # after a reset in this transaction: folds into its value
            base = self.writes[cell]
            self.writes[cell] = spec.encode(spec.fold(None if base is None else spec.parse(base), acc))
        else:
            self.deltas[cell] = spec.fold(self.deltas.get(cell), acc)

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
            if self.store._spec(cell) is not None:
                self.store.reset_starts.setdefault(cell, {})[ts] = self.start
            self.store.versions.setdefault(cell, {})[ts] = value
        for cell, delta in self.deltas.items():
            self.store.deltas.setdefault(cell, {})[ts] = delta
        self.store.weak_sent.extend(sorted(self.weak))
        return ts
