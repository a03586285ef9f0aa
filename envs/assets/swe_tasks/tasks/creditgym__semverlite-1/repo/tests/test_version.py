import unittest

from semverlite import InvalidVersion, Version


class ParseTest(unittest.TestCase):
    def test_round_trip(self):
        for text in ("0.0.0", "1.2.3", "10.20.30", "1.0.0-alpha.1", "1.0.0+20130313144700", "1.0.0-rc.1+b.7"):
            self.assertEqual(str(Version.parse(text)), text)

    def test_fields(self):
        version = Version.parse("1.4.0-rc.1+build.7")
        self.assertEqual((version.major, version.minor, version.patch), (1, 4, 0))
        self.assertEqual(version.prerelease, ("rc", "1"))
        self.assertEqual(version.build, ("build", "7"))
        self.assertTrue(version.is_prerelease)

    def test_invalid(self):
        for text in ("1", "1.2", "01.2.3", "1.2.3-", "1.2.3-01", "1.2.3+", "v1.2.3", "1.2.3.4"):
            with self.assertRaises(InvalidVersion, msg=text):
                Version.parse(text)


class OrderingTest(unittest.TestCase):
    def test_numeric_fields_compare_as_numbers(self):
        versions = [Version.parse(v) for v in ("1.10.0", "1.2.3", "1.9.9", "2.0.0", "0.9.12")]
        self.assertEqual([str(v) for v in sorted(versions)], ["0.9.12", "1.2.3", "1.9.9", "1.10.0", "2.0.0"])

    def test_build_metadata_is_ignored(self):
        self.assertEqual(Version.parse("1.0.0+a"), Version.parse("1.0.0+b"))
        self.assertEqual(len({Version.parse("1.0.0+a"), Version.parse("1.0.0")}), 1)


class BumpTest(unittest.TestCase):
    def test_bumps(self):
        version = Version.parse("1.4.2")
        self.assertEqual(str(version.bump_major()), "2.0.0")
        self.assertEqual(str(version.bump_minor()), "1.5.0")
        self.assertEqual(str(version.bump_patch()), "1.4.3")
        self.assertEqual(str(Version.parse("1.4.2-rc.2").bump_patch()), "1.4.2")


if __name__ == "__main__":
    unittest.main()
