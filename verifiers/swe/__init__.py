"""SWE tasks: the sandbox contract and its Docker implementation, task images, and grading with swebench."""
