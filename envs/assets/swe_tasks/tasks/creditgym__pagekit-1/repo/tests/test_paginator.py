import unittest

from pagekit import EmptyPage, PageNotAnInteger, Paginator


class PaginatorTest(unittest.TestCase):
    def test_num_pages_rounds_up(self):
        self.assertEqual(Paginator(list(range(25)), per_page=10).num_pages, 3)
        self.assertEqual(Paginator(list(range(30)), per_page=10).num_pages, 3)

    def test_last_page_holds_the_remainder(self):
        page = Paginator(list(range(25)), per_page=10).page(3)
        self.assertEqual(page.items, [20, 21, 22, 23, 24])
        self.assertEqual((page.start_index(), page.end_index()), (21, 25))
        self.assertFalse(page.has_next())
        self.assertTrue(page.has_previous())

    def test_orphans_below_threshold_join_previous_page(self):
        paginator = Paginator(list(range(22)), per_page=10, orphans=3)
        self.assertEqual(paginator.num_pages, 2)
        self.assertEqual(paginator.page(2).items, list(range(10, 22)))

    def test_empty_list_has_one_empty_page(self):
        paginator = Paginator([], per_page=10)
        self.assertEqual(paginator.num_pages, 1)
        self.assertEqual(paginator.page(1).items, [])
        self.assertEqual(paginator.page(1).start_index(), 0)

    def test_invalid_page_numbers(self):
        paginator = Paginator(list(range(5)), per_page=2)
        with self.assertRaises(EmptyPage):
            paginator.page(0)
        with self.assertRaises(EmptyPage):
            paginator.page(4)
        with self.assertRaises(PageNotAnInteger):
            paginator.page("2")


if __name__ == "__main__":
    unittest.main()
