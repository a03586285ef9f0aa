"""The credit probe: each module's advantages against Monte-Carlo A* on one batch (`run`), and its report."""
