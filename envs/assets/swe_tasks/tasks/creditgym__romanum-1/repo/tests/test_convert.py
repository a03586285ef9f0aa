import unittest

from romanum import RomanError, from_roman, to_roman

KNOWN = {
    1: "I",
    4: "IV",
    9: "IX",
    14: "XIV",
    40: "XL",
    90: "XC",
    400: "CD",
    1994: "MCMXCIV",
    2024: "MMXXIV",
}


class ToRomanTest(unittest.TestCase):
    def test_known_values(self):
        for number, numeral in KNOWN.items():
            self.assertEqual(to_roman(number), numeral)

    def test_out_of_range(self):
        for number in (0, -1, 4000):
            with self.assertRaises(RomanError):
                to_roman(number)

    def test_rejects_non_integers(self):
        for value in (1.0, "4", True):
            with self.assertRaises(TypeError):
                to_roman(value)


class FromRomanTest(unittest.TestCase):
    def test_known_values(self):
        for number, numeral in KNOWN.items():
            self.assertEqual(from_roman(numeral), number)

    def test_case_and_whitespace(self):
        self.assertEqual(from_roman("  mcmxciv "), 1994)

    def test_rejects_non_standard_forms(self):
        for text in ("", "IIII", "VX", "IC", "MMMM", "XIIV", "ABC"):
            with self.assertRaises(RomanError):
                from_roman(text)


if __name__ == "__main__":
    unittest.main()
