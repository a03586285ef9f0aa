"""Verdicts for answers too large to build, without building them (worker side of :mod:`creditgym.verifiers.math`).

``7^{10000000}`` against ``7^{10000000}+1``, ``10^{10^{10^{10}}}`` against ``9^{9^{9^{9}}}``, ``1000000!`` against
``1000001!``: sympy (and math-verify with it) spends its whole deadline trying to build such numbers. When
:func:`creditgym.verifiers.math.fast.to_sympy` refuses a tree as too large, :func:`decide` compares the two trees
through three cheap views, each exact or conservative:

1. **Canonical form**: the value as an expanded sum of terms ``coefficient * p1^E1 * p2^E2 * ... * n!``, with
   integer bases split into primes (``16^{5} = 2^{20}``), roots as rational exponents (``\\sqrt{\\sqrt{2}} = 2^{1/4}``),
   powers of powers multiplied out and equal bases merged. Exponents are exact integers or fractions when small
   enough, else canonical forms themselves. Equal canonical forms mean equal values: ``correct``. This is the only
   way the guard says ``correct``.
2. **Magnitude**: ``log10 |value|`` in level-index form (``10^10^...^v``, see :class:`Mag`), with the sign. Two
   magnitudes that differ beyond float error, or opposite signs, mean different values: ``wrong``.
3. **Residues** modulo a few fixed primes (exponents reduced with the Carmichael function, ``n! = 0`` for
   ``n >= m``). A different residue means a different value: ``wrong`` (``n!`` against ``n! + 1``, ``k^e`` against
   ``k^e + 1``). Equal residues prove nothing and are never used to say ``correct``, so crafting a collision gains
   a response nothing.

When none of the three decides, :func:`decide` returns ``None`` and the verdict says the comparison is past the
size budget. Every step is bounded: terms, exponents and recursion are capped, and residues of ``n!`` are only
computed for ``n <= 10^5``.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Union

import sympy

from creditgym.verifiers.math.fast import MAX_EXACT_BITS, Node

__all__ = ["Mag", "canonical", "decide"]

_MAX_TERMS = 64
_MAX_EXPAND_POWER = 6
_FACTOR_LIMIT = 1 << 64
_FACTORIAL_LOOP = 100_000
_MODULI = (101, 1009, 65_537, 998_244_353, 1_000_000_007, 2_147_483_647)
_LOG10_E = math.log10(math.e)


class GiveUp(Exception):
    """The guard cannot reason about this tree (a variable, a float, a limit reached)."""


# ------------------------------------------------------------------------------------------------ canonical form

# A canonical value: a sorted tuple of (monomial, coefficient); a monomial is a sorted tuple of (base, exponent);
# a base is a prime (int) or ("fact", n) with n a Fraction or a Canon; an exponent is a Fraction or a Canon.
Canon = tuple[tuple[tuple[tuple[Any, Any], ...], Fraction], ...]
Exponent = Union[Fraction, "Canon"]


def _const(value: Fraction) -> Canon:
    return (((), value),) if value else ()


def _as_fraction(canon: Canon) -> Fraction | None:
    if not canon:
        return Fraction(0)
    if len(canon) == 1 and canon[0][0] == ():
        return canon[0][1]
    return None


def _exponent(canon: Canon) -> Exponent:
    small = _as_fraction(canon)
    return small if small is not None else canon


def _exp_canon(e: Exponent) -> Canon:
    return _const(e) if isinstance(e, Fraction) else e


def _add(a: Canon, b: Canon) -> Canon:
    terms: dict[Any, Fraction] = dict(a)
    for mono, coeff in b:
        terms[mono] = terms.get(mono, Fraction(0)) + coeff
    out = tuple(sorted(((m, c) for m, c in terms.items() if c), key=repr))
    if len(out) > _MAX_TERMS:
        raise GiveUp("too many terms")
    return out


def _bits(value: Fraction) -> int:
    return max(abs(value.numerator).bit_length(), value.denominator.bit_length())


def _mul_monomials(a: tuple[Any, ...], b: tuple[Any, ...]) -> tuple[tuple[Any, ...], Fraction]:
    """Merge two monomials; integer parts of small prime powers move into the coefficient."""
    exps: dict[Any, Canon] = {}
    for base, e in (*a, *b):
        exps[base] = _add(exps.get(base, ()), _exp_canon(e))
    coeff = Fraction(1)
    mono = []
    for base, e_canon in exps.items():
        e = _exponent(e_canon)
        if isinstance(e, Fraction) and isinstance(base, int):
            whole = math.floor(e)
            if whole and abs(whole) * base.bit_length() <= MAX_EXACT_BITS:
                coeff *= Fraction(base) ** whole
                e -= whole
        if e != 0:
            mono.append((base, e))
    return tuple(sorted(mono, key=repr)), coeff


def _mul(a: Canon, b: Canon) -> Canon:
    if len(a) * len(b) > _MAX_TERMS:
        raise GiveUp("too many terms")
    out: Canon = ()
    for mono_a, ca in a:
        for mono_b, cb in b:
            mono, c = _mul_monomials(mono_a, mono_b)
            out = _add(out, ((mono, c * ca * cb),))
    if any(_bits(c) > MAX_EXACT_BITS for _, c in out):
        raise GiveUp("a coefficient past the exact budget")
    return out


@functools.lru_cache(maxsize=4096)
def _factor(n: int) -> tuple[tuple[int, int], ...]:
    if n >= _FACTOR_LIMIT:
        raise GiveUp("a base too large to factor")
    return tuple(sorted(sympy.factorint(n).items()))


def _power_of_int(base: int, e: Exponent) -> Canon:
    """``base^e`` for an integer base >= 2, as primes with exponents."""
    out: Canon = _const(Fraction(1))
    for p, k in _factor(base):
        scaled = _exponent(_mul(_const(Fraction(k)), _exp_canon(e)))
        out = _mul(out, (((((p, scaled),)), Fraction(1)),))
    return out


def _power(base: Canon, e: Exponent) -> Canon:
    small = _as_fraction(base)
    if small is not None:
        if small == 1:
            return base
        if small == 0:  # 0^e is 0 only for e > 0; a huge exponent's sign is not known here
            if not (isinstance(e, Fraction) and e > 0):
                raise GiveUp("zero to a power that may not be positive")
            return base
        if (
            isinstance(e, Fraction)
            and e.denominator == 1
            and _bits(small) * abs(e.numerator) <= MAX_EXACT_BITS
        ):
            return _const(small**e.numerator)
        if small < 0:
            raise GiveUp("a power of a negative base")
        num = _power_of_int(small.numerator, e) if small.numerator > 1 else _const(Fraction(1))
        if small.denominator > 1:
            neg = e * -1 if isinstance(e, Fraction) else _mul(_const(Fraction(-1)), e)
            num = _mul(num, _power_of_int(small.denominator, neg))
        return num
    if len(base) == 1:  # c * prod p^E: multiply every exponent by e
        mono, coeff = base[0]
        out = _power(_const(coeff), e)
        for b, be in mono:
            scaled = _exponent(_mul(_exp_canon(be), _exp_canon(e)))
            out = _mul(out, (((((b, scaled),)), Fraction(1)),))
        return out
    if isinstance(e, Fraction) and e.denominator == 1 and 0 < e.numerator <= _MAX_EXPAND_POWER:
        out = _const(Fraction(1))
        for _ in range(e.numerator):
            out = _mul(out, base)
        return out
    raise GiveUp("a power of a sum")


def _rebase(canon: Canon) -> Canon:
    """Write the terms of a sum over the smallest exponent of each prime they share: ``7^E - 7^{E-1}`` becomes
    ``(7 - 1) * 7^{E-1}``, so that it equals ``6 * 7^{E-1}`` term by term."""
    lowest: dict[int, Fraction] = {}
    for mono, _ in canon:
        for base, e in mono:
            if isinstance(base, int) and isinstance(e, Fraction) and (base not in lowest or e < lowest[base]):
                lowest[base] = e
    out: Canon = ()
    for mono, coeff in canon:
        shifted = []
        for base, e in mono:
            low = lowest.get(base) if isinstance(base, int) and isinstance(e, Fraction) else None
            diff = e - low if low is not None else Fraction(0)
            if diff and diff.denominator == 1 and diff * base.bit_length() <= MAX_EXACT_BITS:
                coeff *= Fraction(base) ** int(diff)
                e = low
            shifted.append((base, e))
        out = _add(out, ((tuple(sorted(shifted, key=repr)), coeff),))
    return out


def canonical(node: Node) -> Canon:
    """The canonical form of a numeric tree; raises :class:`GiveUp` on variables, decimals, limits."""
    tag = node[0]
    if tag == "num":
        if "." in node[1]:
            raise GiveUp("a decimal")
        return _const(Fraction(int(node[1])))
    if tag == "neg":
        return _mul(_const(Fraction(-1)), canonical(node[1]))
    if tag == "add":
        out: Canon = ()
        for child in node[1:]:
            out = _add(out, canonical(child))
        return _rebase(out)
    if tag == "mul":
        out = _const(Fraction(1))
        for child in node[1:]:
            out = _mul(out, canonical(child))
        return out
    if tag == "div":
        return _mul(canonical(node[1]), _power(canonical(node[2]), Fraction(-1)))
    if tag == "pow":
        return _power(canonical(node[1]), _exponent(canonical(node[2])))
    if tag == "root":
        index = _as_fraction(canonical(node[2]))
        if index is None or index.denominator != 1 or index <= 0:
            raise GiveUp("a root of a strange index")
        return _power(canonical(node[1]), 1 / index)
    if tag == "fact":
        n = _exponent(canonical(node[1]))
        if isinstance(n, Fraction):
            if n.denominator != 1 or n < 0:
                raise GiveUp("a factorial of a non-integer")
            if n <= 2 or int(n) * int(n).bit_length() <= MAX_EXACT_BITS:
                return _const(Fraction(math.factorial(int(n))))
        return (((((("fact", n), Fraction(1)),)), Fraction(1)),)
    raise GiveUp(f"{tag} in a huge expression")


# ------------------------------------------------------------------------------------------------ magnitudes


@dataclass(frozen=True)
class Mag:
    """A positive number ``10^10^...^v`` with ``level`` exponentiations (level 0: the number ``v`` itself).

    Normal form: level 0 with ``v < 1e300``, or level >= 1 with ``300 <= v < 1e300``.
    """

    level: int
    v: float

    @staticmethod
    def of(value: Fraction | int) -> Mag:
        value = abs(Fraction(value))
        if value == 0:
            raise GiveUp("log of zero")
        if _bits(value) < 900:
            return Mag(0, float(value)).normal()
        return Mag(1, _log10(value.numerator) - _log10(value.denominator)).normal()

    def normal(self) -> Mag:
        level, v = self.level, self.v
        while v >= 1e300:
            level, v = level + 1, math.log10(v)
        while level > 0 and v < 300:
            level, v = level - 1, 10.0**v
        return Mag(level, v)

    def log10(self) -> Mag:
        if self.level == 0:
            if self.v <= 1:
                raise GiveUp("log of a number <= 1")
            return Mag(0, math.log10(self.v))
        return Mag(self.level - 1, self.v).normal()

    def exp10(self) -> Mag:
        return Mag(self.level + 1, self.v).normal()

    def at(self, level: int) -> float:
        """``v`` lifted to ``level`` (>= self.level) by taking logarithms."""
        v = self.v
        for _ in range(level - self.level):
            if v <= 0:
                raise GiveUp("log of a non-positive number")
            v = math.log10(v)
        return v


def _log10(n: int) -> float:
    shift = max(0, n.bit_length() - 60)
    return math.log10(n >> shift) + shift * math.log10(2)


def _mag_add(a: Mag, b: Mag) -> Mag:
    """a + b for positive magnitudes (a tiny relative error at level >= 2, where the smaller one vanishes)."""
    level = max(a.level, b.level)
    if level == 0:
        return Mag(0, a.v + b.v).normal()
    va, vb = a.at(level), b.at(level)
    if level == 1:
        hi, lo = max(va, vb), min(va, vb)
        return Mag(1, hi + math.log10(1 + 10 ** (lo - hi))).normal()
    return Mag(level, max(va, vb))


def _shift(m: Mag, delta: float) -> Mag:
    """``m + delta`` for a small ``delta`` (negligible next to a magnitude at level >= 1)."""
    if m.level > 0:
        return m
    if m.v + delta <= 0:
        raise GiveUp("a magnitude below zero")
    return Mag(0, m.v + delta).normal()


def _bigger(a: Mag, b: Mag) -> bool:
    return (a.level, a.v) >= (b.level, b.v)


def _mag_mul(a: Mag, b: Mag) -> Mag:
    if a.level == 0 and b.level == 0 and a.v * b.v < 1e300:
        return Mag(0, a.v * b.v).normal()
    big, small = (a, b) if _bigger(a, b) else (b, a)
    log_big = big.log10()  # big >= 1e150 here, so its logarithm is positive
    if small.level > 0 or small.v > 1:
        return _mag_add(log_big, small.log10()).exp10()
    if small.v <= 0:
        raise GiveUp("a zero factor")
    return _shift(log_big, math.log10(small.v)).exp10()


def _differ(a: Mag, b: Mag, tolerance: float = 1e-11) -> bool:
    """Whether two magnitudes are certainly different numbers (float error stays far below ``tolerance``)."""
    level = max(a.level, b.level)
    va, vb = a.at(level), b.at(level)
    return abs(va - vb) > tolerance * max(abs(va), abs(vb), 1.0)


def _exp_mag(e: Exponent) -> Mag:
    if isinstance(e, Fraction):
        if e <= 0:
            raise GiveUp("a non-positive exponent")
        return Mag.of(e)
    sign, mag = signed_magnitude(e)
    if sign <= 0:
        raise GiveUp("a negative huge exponent")
    return mag


def _log_factorial(n: Mag) -> Mag:
    """log10(n!): exact to float precision below 1e300 (``lgamma``), else ``n log10 n`` (relative error 1/log n)."""
    if n.level == 0:
        return Mag(0, math.lgamma(n.v + 1) / math.log(10)).normal()
    return _mag_mul(n, n.log10())


def _term_mag(mono: tuple[Any, ...], coeff: Fraction) -> Mag:
    total: Mag | None = None
    for base, e in mono:
        if isinstance(base, int):
            part = _mag_mul(_exp_mag(e), Mag(0, math.log10(base)))
        else:
            if e != 1:
                raise GiveUp("a power of a factorial")
            part = _log_factorial(_exp_mag(base[1]))
        total = part if total is None else _mag_add(total, part)
    if total is None:
        return Mag.of(coeff)
    c = abs(coeff)
    total = _mag_add(total, Mag.of(c).log10()) if c > 1 else _shift(total, math.log10(c))
    return total.exp10()


def signed_magnitude(canon: Canon) -> tuple[int, Mag]:
    """(sign, |value|) of a canonical form; raises :class:`GiveUp` when cancellation makes it unclear."""
    parts: dict[int, Mag] = {}
    for mono, coeff in canon:
        mag = _term_mag(mono, coeff)
        sign = 1 if coeff > 0 else -1
        parts[sign] = _mag_add(parts[sign], mag) if sign in parts else mag
    if not parts:
        return 0, Mag(0, 0.0)
    if len(parts) == 1:
        ((sign, mag),) = parts.items()
        return sign, mag
    pos, neg = parts[1], parts[-1]
    if not _differ(pos, neg, 1e-6):
        raise GiveUp("terms that may cancel")
    big, small, sign = (pos, neg, 1) if _bigger(pos, neg) else (neg, pos, -1)
    level = max(big.level, small.level)
    if level == 0:
        return sign, Mag(0, big.v - small.v).normal()
    if level == 1 and big.at(1) - small.at(1) < 30:
        hi, lo = big.at(1), small.at(1)
        return sign, Mag(1, hi + math.log10(1 - 10 ** (lo - hi))).normal()
    return sign, big


# ------------------------------------------------------------------------------------------------ residues


@functools.lru_cache(maxsize=1024)
def _carmichael(m: int) -> int:
    return int(sympy.reduced_totient(m))


def residue(canon: Canon, m: int) -> int | None:
    """The value modulo ``m``, or ``None`` when it is not an integer-like value this can reduce."""
    total = 0
    for mono, coeff in canon:
        try:
            term = coeff.numerator * pow(coeff.denominator, -1, m) % m
        except ValueError:
            return None
        for base, e in mono:
            r = _atom_residue(base, e, m)
            if r is None:
                return None
            term = term * r % m
        total += term
    return total % m


def _atom_residue(base: Any, e: Exponent, m: int) -> int | None:
    if isinstance(base, tuple):  # n!
        n = base[1]
        if not isinstance(n, Fraction):
            value = 0  # a huge n is far above m, so m divides n!
        elif n >= m:
            value = 0
        elif n <= _FACTORIAL_LOOP:
            value = 1
            for k in range(2, int(n) + 1):
                value = value * k % m
        else:
            return None
    else:
        value = base % m
    if isinstance(e, Fraction):
        if e.denominator != 1 or e < 0:
            return None
        return pow(value, int(e), m)
    lam = _carmichael(m)
    reduced = residue(e, lam)
    if reduced is None:
        return None
    # For an exponent E >= log2(m) (a huge E is), b^E = b^(lam + E mod lam) modulo m, for every b.
    return pow(value, lam + reduced, m)


# ------------------------------------------------------------------------------------------------ decisions


def decide(gold: Node, answer: Node) -> str | None:
    """``"correct"``, ``"wrong"``, or ``None`` when the three views cannot tell (see the module docstring)."""
    try:
        g, a = canonical(gold), canonical(answer)
    except (GiveUp, RecursionError, OverflowError, ZeroDivisionError, ValueError, TypeError):
        return None
    try:
        difference = _rebase(_add(g, _mul(_const(Fraction(-1)), a)))
    except (GiveUp, OverflowError, ValueError, ZeroDivisionError, TypeError):
        difference = None
    if g == a or difference == ():
        return "correct"
    checks = (
        lambda: difference is not None and _as_fraction(difference) is not None,
        lambda: difference is not None and signed_magnitude(difference)[0] != 0,
        lambda: _magnitudes_differ(g, a),
        lambda: any(_residues_differ(g, a, m) for m in _MODULI),
    )
    for check in checks:
        try:
            if check():
                return "wrong"
        except (GiveUp, OverflowError, ValueError, ZeroDivisionError, TypeError, RecursionError):
            continue
    return None


def _magnitudes_differ(g: Canon, a: Canon) -> bool:
    (sg, mg), (sa, ma) = signed_magnitude(g), signed_magnitude(a)
    return sg != sa or (sg != 0 and _differ(mg, ma))


def _residues_differ(g: Canon, a: Canon, m: int) -> bool:
    rg, ra = residue(g, m), residue(a, m)
    return rg is not None and ra is not None and rg != ra
