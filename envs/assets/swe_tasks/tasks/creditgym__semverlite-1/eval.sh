#!/bin/bash
set -uxo pipefail
cd /testbed
git checkout a228c44f400aba45a89f747afffbd68944b1e7b0 -- tests/test_version.py
git apply -v - <<'EOF_114329324912'
diff --git a/tests/test_version.py b/tests/test_version.py
index bb59bb0..e66d176 100644
--- a/tests/test_version.py
+++ b/tests/test_version.py
@@ -26,6 +26,26 @@ class OrderingTest(unittest.TestCase):
         versions = [Version.parse(v) for v in ("1.10.0", "1.2.3", "1.9.9", "2.0.0", "0.9.12")]
         self.assertEqual([str(v) for v in sorted(versions)], ["0.9.12", "1.2.3", "1.9.9", "1.10.0", "2.0.0"])
 
+    def test_prerelease_sorts_before_release(self):
+        self.assertLess(Version.parse("1.0.0-rc.1"), Version.parse("1.0.0"))
+        self.assertEqual(str(max(Version.parse(v) for v in ("2.0.0-rc.1", "2.0.0", "1.9.0"))), "2.0.0")
+
+    def test_prerelease_precedence_follows_the_spec(self):
+        chain = [
+            "1.0.0-alpha",
+            "1.0.0-alpha.1",
+            "1.0.0-alpha.beta",
+            "1.0.0-beta",
+            "1.0.0-beta.2",
+            "1.0.0-beta.11",
+            "1.0.0-rc.1",
+            "1.0.0",
+        ]
+        versions = [Version.parse(v) for v in chain]
+        for lower, higher in zip(versions, versions[1:]):
+            self.assertLess(lower, higher, f"{lower} < {higher}")
+        self.assertEqual([str(v) for v in sorted(reversed(versions))], chain)
+
     def test_build_metadata_is_ignored(self):
         self.assertEqual(Version.parse("1.0.0+a"), Version.parse("1.0.0+b"))
         self.assertEqual(len({Version.parse("1.0.0+a"), Version.parse("1.0.0")}), 1)
EOF_114329324912
: '>>>>> Start Test Output'
python3 -m unittest -v 2>&1
: '>>>>> End Test Output'
git checkout a228c44f400aba45a89f747afffbd68944b1e7b0 -- tests/test_version.py
