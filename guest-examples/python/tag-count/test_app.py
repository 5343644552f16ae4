import random
import unittest
from collections import Counter

from app import COUNT, COUNTED, MAX_TAG_LEN, TAG_TABLE, TAGS, observe, parse_tags
from percolator_guest import Conflict, Failed, MemStore


def store() -> MemStore:
    """The binding of config/tag-count.toml: its combined column and declared writes."""
    s = MemStore()
    s.combine_column(TAG_TABLE, COUNT, "sum", "i64")
    s.declare_writes("docs", [COUNTED])
    s.declare_writes(TAG_TABLE, [COUNT])
    return s


def counts(s: MemStore, zeros: bool = False) -> dict:
    out = {c.row.decode(): int(v) for c, v in s.cells(TAG_TABLE) if c.column == COUNT}
    return out if zeros else {t: n for t, n in out.items() if n != 0}


def batch(docs: dict) -> dict:
    """The from-scratch count: documents per tag."""
    return dict(Counter(t for text in docs.values() for t in parse_tags(text)))


def write(s: MemStore, doc: str, text) -> None:
    if text is None:
        s.remove("docs", doc, TAGS)
    else:
        s.put("docs", doc, TAGS, text)
    s.observe(observe, s.notification("docs", doc, TAGS))


class TagCountTest(unittest.TestCase):
    def test_tags_are_trimmed_distinct_and_bounded(self):
        self.assertEqual(parse_tags(" rust, wasm ,rust,, "), {"rust", "wasm"})
        self.assertEqual(parse_tags(""), set())
        self.assertEqual(parse_tags("x" * (MAX_TAG_LEN + 1) + ",ok"), {"ok"})

    def test_a_document_changing_tags_subtracts_the_old_ones(self):
        s = store()
        write(s, "d1", "rust, wasm")
        write(s, "d2", "rust")
        self.assertEqual(counts(s), {"rust": 2, "wasm": 1})
        self.assertEqual(s.get_str("docs", "d1", COUNTED), '["rust", "wasm"]')
        write(s, "d1", "wasm, python")
        self.assertEqual(counts(s), {"rust": 1, "wasm": 1, "python": 1})
        write(s, "d2", None)
        self.assertEqual(counts(s, zeros=True), {"rust": 0, "wasm": 1, "python": 1})
        self.assertIsNone(s.get("docs", "d2", COUNTED))

    def test_unchanged_tags_combine_nothing(self):
        s = store()
        write(s, "d1", "a, b")
        s.put("docs", "d1", TAGS, "b,a,a")
        txn = s.begin()
        observe(txn, s.notification("docs", "d1", TAGS))
        self.assertEqual(txn.buffered_combines(), {})
        self.assertEqual(list(txn.writes), [s.notification("docs", "d1", COUNTED).cell])

    def test_documents_sharing_a_tag_never_conflict(self):
        s = store()
        for d in range(5):
            s.put("docs", f"d{d}", TAGS, "hot")
        runs = []
        for d in range(5):
            txn = s.begin()
            observe(txn, s.notification("docs", f"d{d}", TAGS))
            runs.append(txn)
        for txn in runs:
            txn.commit()
        self.assertEqual(counts(s), {"hot": 5})

    def test_two_runs_on_one_document_conflict_so_a_change_counts_once(self):
        s = store()
        s.put("docs", "d1", TAGS, "a")
        n = s.notification("docs", "d1", TAGS)
        first, second = s.begin(), s.begin()
        observe(first, n)
        observe(second, n)
        first.commit()
        with self.assertRaises(Conflict):
            second.commit()
        s.observe(observe, n)  # the retry
        self.assertEqual(counts(s), {"a": 1})

    def test_incremental_equals_batch_in_random_interleavings(self):
        rng = random.Random(7)
        tags = ["rust", "wasm", "python", "js", "db", "ünïcode tag"]
        s = store()
        docs = {}
        pending = []
        for _ in range(400):
            doc = f"d{rng.randrange(12)}"
            text = None if rng.randrange(10) == 0 else ", ".join(rng.sample(tags, rng.randrange(4)))
            if text is None:
                s.remove("docs", doc, TAGS)
                docs.pop(doc, None)
            else:
                s.put("docs", doc, TAGS, text)
                docs[doc] = text
            pending.append(doc)
            # Runs overlap: several start before any commits; conflicting ones are retried.
            if rng.randrange(3) == 0:
                runs = []
                for d in pending:
                    txn = s.begin()
                    observe(txn, s.notification("docs", d, TAGS))
                    runs.append((d, txn))
                rng.shuffle(runs)
                pending = []
                for d, txn in runs:
                    try:
                        txn.commit()
                    except Conflict:
                        pending.append(d)
        for d in pending:
            s.observe(observe, s.notification("docs", d, TAGS))
        self.assertEqual(counts(s), batch(docs))

    def test_a_wrong_column_or_record_fails_naming_it(self):
        s = store()
        with self.assertRaises(Failed) as e:
            s.observe(observe, s.notification("docs", "d1", "doc:other"))
        self.assertIn("docs/doc:other", e.exception.message)
        s.put("docs", "d1", COUNTED, "not json")
        s.put("docs", "d1", TAGS, "a")
        with self.assertRaises(Failed) as e:
            s.observe(observe, s.notification("docs", "d1", TAGS))
        self.assertIn("docs/d1/tc:counted", e.exception.message)


if __name__ == "__main__":
    unittest.main()
