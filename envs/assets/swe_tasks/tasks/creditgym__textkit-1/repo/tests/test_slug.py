import unittest

from textkit import slugify


class SlugifyTest(unittest.TestCase):
    def test_basic(self):
        self.assertEqual(slugify("Hello World"), "hello-world")

    def test_punctuation_and_accents(self):
        self.assertEqual(slugify("Héllo, Wörld!"), "hello-world")
        self.assertEqual(slugify("  C'est déjà l'été  "), "cest-deja-lete")

    def test_runs_collapse(self):
        self.assertEqual(slugify("a  --  b__c"), "a-b-c")

    def test_custom_separator_and_case(self):
        self.assertEqual(slugify("Hello World", separator="_", lowercase=False), "Hello_World")

    def test_max_length_cuts_back_to_a_word_boundary(self):
        self.assertEqual(slugify("The Quick Brown Fox", max_length=12), "the-quick")
        self.assertEqual(slugify("Hello big world", max_length=10), "hello-big")
        self.assertEqual(slugify("Supercalifragilistic", max_length=5), "super")


class TruncateTest(unittest.TestCase):
    def test_short_text_unchanged(self):
        from textkit import truncate

        self.assertEqual(truncate("short", 10), "short")
        self.assertEqual(truncate("A fairly long sentence", 12), "A fairly…")


if __name__ == "__main__":
    unittest.main()
