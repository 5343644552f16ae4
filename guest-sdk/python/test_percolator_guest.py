"""The SDK's own tests (plain CPython): combined columns on MemStore, and the delta kinds.

Run from this folder: ``python3 -m unittest -q`` (scripts/test does).
"""

import unittest

from percolator_guest import Conflict, Denied, InvalidArgument, MemStore, _delta, _format_f64


def combined() -> MemStore:
    """t/c:n sum i64, t/c:f sum f64, t/c:lo min i64, t/c:tags set."""
    store = MemStore()
    store.combine_column("t", "c:n", "sum", "i64")
    store.combine_column("t", "c:f", "sum", "f64")
    store.combine_column("t", "c:lo", "min", "i64")
    store.combine_column("t", "c:tags", "set", "set")
    return store


def run(store: MemStore, f) -> int:
    txn = store.begin()
    f(txn)
    return txn.commit()


class CombineTest(unittest.TestCase):
    def test_delta_kinds(self):
        self.assertEqual(_delta("t", "r", "c", 3), ("int", 3))
        self.assertEqual(_delta("t", "r", "c", -2.5), ("float", -2.5))
        self.assertEqual(_delta("t", "r", "c", ["a", "b"]), ("members", ["a", "b"]))
        self.assertEqual(_delta("t", "r", "c", ("a",)), ("members", ["a"]))
        self.assertEqual(_delta("t", "r", "c", {"a"}), ("members", ["a"]))
        self.assertEqual(_delta("t", "r", "c", frozenset()), ("members", []))
        for bad in [True, "a", b"a", None, {"a": 1}, ["a", 1], 1 << 63]:
            with self.assertRaises(InvalidArgument, msg=repr(bad)) as e:
                _delta("t", "r", "c:x", bad)
            self.assertIn("combine into t/c:x of row 'r'", e.exception.message)

    def test_floats_are_written_as_the_store_writes_them(self):
        cases = {1e16: "1e16", 9999999999999998.0: "9999999999999998.0", 1e15: "1000000000000000.0",
                 0.0001: "0.0001", 0.00001: "1e-5", 1.5e-7: "1.5e-7", 1e300: "1e300", 3.0: "3.0",
                 -0.0: "-0.0", 1.2345e20: "1.2345e20", 5e-324: "5e-324"}
        for f, text in cases.items():
            self.assertEqual(_format_f64(f), text)

    def test_concurrent_combines_into_one_cell_all_commit(self):
        store = combined()
        txns = [store.begin() for _ in range(5)]
        for i, t in enumerate(txns):
            t.combine("t", "r", "c:n", i + 1)
            t.combine("t", "r", "c:tags", [f"m{i % 2}"])
        for t in txns:
            t.commit()
        self.assertEqual(store.get_str("t", "r", "c:n"), "15")
        self.assertEqual(store.get_str("t", "r", "c:tags"), '["m0","m1"]')
        reset, add, other_reset = store.begin(), store.begin(), store.begin()
        reset.set_str("t", "r", "c:n", "100")
        add.combine("t", "r", "c:n", 1)
        other_reset.delete("t", "r", "c:n")
        add.commit()
        reset.commit()
        with self.assertRaises(Conflict):
            other_reset.commit()
        self.assertEqual(store.get_str("t", "r", "c:n"), "101", "the delta committed during the reset applies on top")

    def test_reads_fold_the_snapshot_with_own_deltas(self):
        store = combined()
        run(store, lambda t: t.combine("t", "r", "c:n", 10))
        txn = store.begin()
        run(store, lambda t: t.combine("t", "r", "c:n", 1000))  # after the snapshot
        self.assertEqual(txn.get_str("t", "r", "c:n"), "10")
        txn.combine("t", "r", "c:n", 5)
        txn.combine("t", "r", "c:n", -2)
        self.assertEqual(txn.get_str("t", "r", "c:n"), "13")
        self.assertEqual(list(txn.buffered_combines().values()), [b"3"])
        self.assertEqual(txn.writes, {}, "a combine is not a write")
        self.assertEqual([(e.row, e.value) for e in txn.scan("t")], [(b"r", b"13")])
        txn.commit()
        self.assertEqual(store.get_str("t", "r", "c:n"), "1013")
        self.assertEqual([(c.column, v) for c, v in store.cells("t")], [("c:n", b"1013")])

    def test_values_are_text_of_the_type(self):
        store = combined()

        def adds(t):
            t.combine("t", "r", "c:f", 2.5)
            t.combine("t", "r", "c:f", 1)
            t.combine("t", "s", "c:f", 1e300)
            t.combine("t", "r", "c:lo", 7)
            t.combine("t", "r", "c:lo", -3)
            t.combine("t", "r", "c:tags", ["b", 'a"q', "b", "é"])
            t.combine("t", "s", "c:tags", [])

        run(store, adds)
        run(store, lambda t: t.combine("t", "r", "c:lo", 4))
        run(store, lambda t: t.combine("t", "t", "c:f", 3))
        self.assertEqual(store.get_str("t", "r", "c:f"), "3.5")
        self.assertEqual(store.get_str("t", "s", "c:f"), "1e300")
        self.assertEqual(store.get_str("t", "t", "c:f"), "3.0")
        self.assertEqual(store.get_str("t", "r", "c:lo"), "-3")
        self.assertEqual(store.get_str("t", "r", "c:tags"), '["a\\"q","b","é"]')
        self.assertEqual(store.get_str("t", "s", "c:tags"), "[]")
        big = (1 << 63) - 1
        for d in [big, 1, -1]:
            run(store, lambda t, d=d: t.combine("t", "big", "c:n", d))
        self.assertEqual(store.get_str("t", "big", "c:n"), str(big - 1), "i64 sums saturate at each step")

    def test_set_and_delete_reset_a_combined_column(self):
        store = combined()
        run(store, lambda t: t.combine("t", "r", "c:n", 10))
        txn = store.begin()
        txn.combine("t", "r", "c:n", 1)
        txn.set_str("t", "r", "c:n", "5")
        self.assertEqual(txn.get_str("t", "r", "c:n"), "5", "the own delta went too")
        txn.combine("t", "r", "c:n", 2)
        self.assertEqual(txn.get_str("t", "r", "c:n"), "7", "folded into the reset")
        run(store, lambda t: t.combine("t", "r", "c:n", 100))  # while the reset runs
        txn.commit()
        self.assertEqual(store.get_str("t", "r", "c:n"), "107")
        run(store, lambda t: t.delete("t", "r", "c:n"))
        self.assertIsNone(store.get("t", "r", "c:n"))
        run(store, lambda t: t.combine("t", "r", "c:n", -4))
        self.assertEqual(store.get_str("t", "r", "c:n"), "-4")
        store.put("t", "r", "c:n", "1")
        run(store, lambda t: t.combine("t", "r", "c:n", 1))
        self.assertEqual(store.get_str("t", "r", "c:n"), "2")

    def test_errors_name_the_cell(self):
        store = combined()
        txn = store.begin()
        cases = [
            ("c:plain", 1, "not declared combined"),
            ("c:n", 1.5, "combine into t/c:n of row 'r': a float delta"),
            ("c:n", ["a"], "set members, but the column holds i64 (sum)"),
            ("c:tags", 1, "an integer delta, but the column holds set (set)"),
            ("c:f", float("nan"), "not a finite number"),
            ("c:f", float("inf"), "not a finite number"),
        ]
        for column, delta, message in cases:
            with self.assertRaises(InvalidArgument) as e:
                txn.combine("t", "r", column, delta)
            self.assertIn(message, e.exception.message)
        for column, value in [("c:n", b"1.5"), ("c:tags", b"[1]"), ("c:f", b"inf"), ("c:n", b" 1")]:
            with self.assertRaises(InvalidArgument):
                txn.set("t", "r", column, value)
        with self.assertRaises(InvalidArgument):
            store.combine_column("t", "c:x", "sum", "set")
        with self.assertRaises(InvalidArgument):
            store.combine_column("t", "c:x", "set", "i64")
        store.declare_writes("t", ["c:f"])
        with self.assertRaises(Denied):
            txn.combine("t", "r", "c:n", 1)
        txn.combine("t", "r", "c:f", 1)
        txn.commit()
        self.assertEqual(store.get_str("t", "r", "c:f"), "1.0")


if __name__ == "__main__":
    unittest.main()
