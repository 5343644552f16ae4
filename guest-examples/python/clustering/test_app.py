import unittest

from app import CANON_URL, CLUSTER_CANONICAL, CLUSTERS, DOC_HASH, EXPORT_DIRTY, PAGES, RAW_PAGERANK, observe
from percolator_guest import Failed, MemStore

H1 = "1" * 32
H2 = "2" * 32


def store():
    s = MemStore()
    s.bind_weak(PAGES, EXPORT_DIRTY)
    return s


def page(s, url, h, pagerank):
    s.put(PAGES, url, DOC_HASH, h) if h else s.remove(PAGES, url, DOC_HASH)
    s.put(PAGES, url, RAW_PAGERANK, pagerank) if pagerank else s.remove(PAGES, url, RAW_PAGERANK)
    s.observe(observe, s.notification(PAGES, url, DOC_HASH))


class ClusteringTest(unittest.TestCase):
    def test_the_highest_pagerank_then_the_smallest_url_is_canonical(self):
        s = store()
        page(s, "b", H1, "0.5")
        page(s, "a", H1, "0.5")
        page(s, "c", H1, "0.2")
        self.assertEqual(s.get_str(CLUSTERS, H1, CANON_URL), "a")
        for url in "abc":
            self.assertEqual(s.get_str(PAGES, url, CLUSTER_CANONICAL), "a")
        page(s, "c", H1, "0.9")
        self.assertEqual(s.get_str(CLUSTERS, H1, CANON_URL), "c")

    def test_moving_to_another_cluster_settles_both(self):
        s = store()
        page(s, "a", H1, "0.5")
        page(s, "b", H1, "0.1")
        page(s, "a", H2, "0.5")
        self.assertEqual(s.get_str(CLUSTERS, H1, CANON_URL), "b")
        self.assertEqual(s.get_str(CLUSTERS, H2, CANON_URL), "a")
        page(s, "a", None, "0.5")
        self.assertIsNone(s.get(CLUSTERS, H2, CANON_URL))
        self.assertIsNone(s.get(PAGES, "a", CLUSTER_CANONICAL))

    def test_a_bad_pagerank_fails_naming_the_cell(self):
        s = store()
        with self.assertRaises(Failed) as e:
            page(s, "a", H1, "-1")
        self.assertIn("pages/a/raw:pagerank", e.exception.message)
        for bad in ("nan", "inf", "1_0", "x"):
            with self.assertRaises(Failed):
                page(s, "a", H1, bad)


if __name__ == "__main__":
    unittest.main()
