#!/bin/bash
set -uxo pipefail
cd /testbed
rm -f tests/test_truncation.py
git apply -v - <<'EOF_114329324912'
diff --git a/tests/test_truncation.py b/tests/test_truncation.py
new file mode 100644
index 0000000..8dd4b57
--- /dev/null
+++ b/tests/test_truncation.py
@@ -0,0 +1,16 @@
+import unittest
+
+from textkit import slugify
+
+
+class SlugTruncationTest(unittest.TestCase):
+    def test_word_that_fits_exactly_is_kept(self):
+        self.assertEqual(slugify("The Quick Brown Fox", max_length=15), "the-quick-brown")
+        self.assertEqual(slugify("Hello big world", max_length=9), "hello-big")
+
+    def test_exact_fit_with_custom_separator(self):
+        self.assertEqual(slugify("Release notes for version two", separator="_", max_length=13), "release_notes")
+
+
+if __name__ == "__main__":
+    unittest.main()
EOF_114329324912
: '>>>>> Start Test Output'
python3 -m unittest -v 2>&1
: '>>>>> End Test Output'
rm -f tests/test_truncation.py
