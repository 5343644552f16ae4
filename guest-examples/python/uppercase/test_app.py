import unittest

from app import SOURCE, TARGET, observe
from percolator_guest import Failed, MemStore


class UppercaseTest(unittest.TestCase):
    def test_writes_the_upper_cased_text_to_the_same_row(self):
        store = MemStore()
        store.declare_writes("docs", [TARGET])
        store.put("docs", "r1", SOURCE, "Hello, wörld")
        store.put("docs", "r2", SOURCE, "untouched")
        store.observe(observe, store.notification("docs", "r1", SOURCE))
        self.assertEqual(store.get_str("docs", "r1", TARGET), "HELLO, WÖRLD")
        self.assertIsNone(store.get("docs", "r2", TARGET))

    def test_the_target_column_is_the_bindings_parameter(self):
        store = MemStore()
        store.set_param("target", "derived:shout")
        store.put("docs", "r1", SOURCE, "hi")
        store.observe(observe, store.notification("docs", "r1", SOURCE))
        self.assertEqual(store.get_str("docs", "r1", "derived:shout"), "HI")
        self.assertIsNone(store.get("docs", "r1", TARGET))

    def test_a_deleted_source_deletes_the_target(self):
        store = MemStore()
        store.put("docs", "r1", TARGET, "STALE")
        store.remove("docs", "r1", SOURCE)
        store.observe(observe, store.notification("docs", "r1", SOURCE))
        self.assertIsNone(store.get("docs", "r1", TARGET))

    def test_non_utf8_fails_and_writes_nothing(self):
        store = MemStore()
        store.put("docs", "r1", SOURCE, b"\xff\xfe")
        with self.assertRaises(Failed):
            store.observe(observe, store.notification("docs", "r1", SOURCE))
        self.assertIsNone(store.get("docs", "r1", TARGET))


if __name__ == "__main__":
    unittest.main()
