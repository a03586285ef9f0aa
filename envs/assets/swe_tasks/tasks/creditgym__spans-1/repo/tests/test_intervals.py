import unittest

from spans import Interval, covered_length, gaps, merge


def intervals(*pairs):
    return [Interval(start, end) for start, end in pairs]


class IntervalTest(unittest.TestCase):
    def test_rejects_reversed_bounds(self):
        with self.assertRaises(ValueError):
            Interval(5, 1)

    def test_overlaps_and_contains(self):
        self.assertTrue(Interval(1, 3).overlaps(Interval(3, 5)))
        self.assertFalse(Interval(1, 2).overlaps(Interval(3, 5)))
        self.assertTrue(Interval(1, 3).contains(3))


class MergeTest(unittest.TestCase):
    def test_overlapping(self):
        self.assertEqual(merge(intervals((1, 4), (2, 6), (8, 9))), intervals((1, 6), (8, 9)))

    def test_unsorted_and_nested(self):
        self.assertEqual(merge(intervals((8, 9), (1, 10), (2, 3))), intervals((1, 10)))

    def test_disjoint_stay_apart(self):
        self.assertEqual(merge(intervals((5, 6), (1, 2))), intervals((1, 2), (5, 6)))

    def test_covered_length(self):
        self.assertEqual(covered_length(intervals((1, 4), (2, 6), (8, 9))), 6)


class GapsTest(unittest.TestCase):
    def test_gaps_between_and_around(self):
        self.assertEqual(
            gaps(intervals((1, 4), (2, 6), (8, 9)), within=Interval(0, 10)),
            intervals((0, 1), (6, 8), (9, 10)),
        )


if __name__ == "__main__":
    unittest.main()
