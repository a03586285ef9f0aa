#!/bin/bash
set -uxo pipefail
cd /testbed
git checkout 089a5423ac0b2b3cb180d2c6407e031c139330aa -- tests/test_convert.py
git apply -v - <<'EOF_114329324912'
diff --git a/tests/test_convert.py b/tests/test_convert.py
index 85d89bf..5a199a4 100644
--- a/tests/test_convert.py
+++ b/tests/test_convert.py
@@ -20,6 +20,9 @@ class ToRomanTest(unittest.TestCase):
         for number, numeral in KNOWN.items():
             self.assertEqual(to_roman(number), numeral)
 
+    def test_largest_value(self):
+        self.assertEqual(to_roman(3999), "MMMCMXCIX")
+
     def test_out_of_range(self):
         for number in (0, -1, 4000):
             with self.assertRaises(RomanError):
@@ -36,6 +39,10 @@ class FromRomanTest(unittest.TestCase):
         for number, numeral in KNOWN.items():
             self.assertEqual(from_roman(numeral), number)
 
+    def test_three_repeated_units(self):
+        for numeral, number in (("III", 3), ("VIII", 8), ("XIII", 13), ("MMMDCCCLXXXVIII", 3888)):
+            self.assertEqual(from_roman(numeral), number)
+
     def test_case_and_whitespace(self):
         self.assertEqual(from_roman("  mcmxciv "), 1994)
 
EOF_114329324912
: '>>>>> Start Test Output'
python3 -m unittest -v 2>&1
: '>>>>> End Test Output'
git checkout 089a5423ac0b2b3cb180d2c6407e031c139330aa -- tests/test_convert.py
