#!/bin/bash
set -uxo pipefail
cd /testbed
git checkout 4020b8b6080c5cdc674e840743ed2748a0380047 -- tests/test_intervals.py
git apply -v - <<'EOF_114329324912'
diff --git a/tests/test_intervals.py b/tests/test_intervals.py
index ac6da40..5afc0b3 100644
--- a/tests/test_intervals.py
+++ b/tests/test_intervals.py
@@ -28,6 +28,21 @@ class MergeTest(unittest.TestCase):
     def test_disjoint_stay_apart(self):
         self.assertEqual(merge(intervals((5, 6), (1, 2))), intervals((1, 2), (5, 6)))
 
+    def test_touching_intervals_merge(self):
+        self.assertEqual(merge(intervals((1, 3), (3, 5), (5, 7))), intervals((1, 7)))
+        self.assertEqual(merge(intervals((10, 12), (0, 10))), intervals((0, 12)))
+
+    def test_merged_intervals_never_overlap(self):
+        cases = [
+            intervals((1, 2), (2, 3)),
+            intervals((0, 5), (5, 5), (7, 9), (9, 9)),
+            intervals((4, 8), (1, 4), (8, 8), (12, 20), (3, 4)),
+        ]
+        for case in cases:
+            merged = merge(case)
+            for left, right in zip(merged, merged[1:]):
+                self.assertFalse(left.overlaps(right), f"{left} and {right} overlap in {merged}")
+
     def test_covered_length(self):
         self.assertEqual(covered_length(intervals((1, 4), (2, 6), (8, 9))), 6)
 
EOF_114329324912
: '>>>>> Start Test Output'
python3 -m unittest -v 2>&1
: '>>>>> End Test Output'
git checkout 4020b8b6080c5cdc674e840743ed2748a0380047 -- tests/test_intervals.py
