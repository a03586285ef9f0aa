"""Math answers: extract the final answer and compare it with the gold one, under a hard per-call deadline.

The public API lives in `verify`; ``extract``, ``fast``, ``guard`` and ``worker`` run inside the pool's workers.
"""

from creditgym.verifiers.math.verify import DEFAULT_TIMEOUT, MathVerifier, verify, verify_many

__all__ = ["DEFAULT_TIMEOUT", "MathVerifier", "verify", "verify_many"]
