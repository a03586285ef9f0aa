#!/bin/bash
set -uxo pipefail
cd /testbed
git checkout 8c750222c14dc27d63869cec77fefa42bf29a8ec -- tests/test_paginator.py
git apply -v - <<'EOF_114329324912'
diff --git a/tests/test_paginator.py b/tests/test_paginator.py
index f057419..9992cc7 100644
--- a/tests/test_paginator.py
+++ b/tests/test_paginator.py
@@ -20,6 +20,19 @@ class PaginatorTest(unittest.TestCase):
         self.assertEqual(paginator.num_pages, 2)
         self.assertEqual(paginator.page(2).items, list(range(10, 22)))
 
+    def test_orphans_at_threshold_join_previous_page(self):
+        paginator = Paginator(list(range(23)), per_page=10, orphans=3)
+        self.assertEqual(paginator.num_pages, 2)
+        self.assertEqual(paginator.page(2).items, list(range(10, 23)))
+        self.assertEqual(paginator.page(2).end_index(), 23)
+
+    def test_iterating_pages_yields_every_item_once(self):
+        items = list(range(47))
+        for per_page, orphans in [(10, 7), (5, 4), (7, 3), (10, 0)]:
+            paginator = Paginator(items, per_page=per_page, orphans=orphans)
+            seen = [item for page in paginator for item in page.items]
+            self.assertEqual(seen, items, f"per_page={per_page}, orphans={orphans}")
+
     def test_empty_list_has_one_empty_page(self):
         paginator = Paginator([], per_page=10)
         self.assertEqual(paginator.num_pages, 1)
EOF_114329324912
: '>>>>> Start Test Output'
python3 -m unittest -v 2>&1
: '>>>>> End Test Output'
git checkout 8c750222c14dc27d63869cec77fefa42bf29a8ec -- tests/test_paginator.py
