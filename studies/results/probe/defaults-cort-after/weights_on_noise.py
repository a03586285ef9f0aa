"""CoRT's weight spread for contrasts of pure noise, the measurement quoted in docs/credit/cort.md (run it at the base
commit dc9fa02 for the "before" figures, at this folder's commit for the "after")::

    .venv/bin/python studies/results/probe/defaults-cort-after/weights_on_noise.py

16 responses of 60 tokens whose contrasts are Gaussian noise of sd 1e-4 to 3 nats; printed: the mean over the
responses of the within-response sd of the weights, with the default config.
"""

from __future__ import annotations

import torch

from creditgym.credit import CoRTConfig
from creditgym.credit.cort import cort_weights


def main() -> None:
    noise = torch.randn(16, 60, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    valid = torch.ones(16, 60, dtype=torch.bool)
    for scale in (1e-4, 0.03, 0.1, 0.5, 1.0, 3.0):
        w = cort_weights(scale * noise, valid, CoRTConfig())
        print(f"contrast sd {scale:g} nats: weight sd {float(w.std(-1, correction=0).mean()):.3f}")


if __name__ == "__main__":
    main()
