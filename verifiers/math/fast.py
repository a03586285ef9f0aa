"""A fast, bounded parser for the common subset of LaTeX answers (worker side of :mod:`creditgym.verifiers.math`).

math-verify parses LaTeX with an ANTLR grammar (5-40 ms a string) and hands sympy whatever the string describes,
including ``9^{9^{9^{9}}}``, which sympy then tries to build. This module reads the subset most answers are written
in, in well under a millisecond, into a small syntax tree (:data:`Node`) that is inspected *before* any symbolic work:

- numbers (``72``, ``-0.25``), ``+ - \\cdot \\times * / \\div``, implicit products (``2x``, ``3\\sqrt{2}``),
  ``^`` with a braced or one-character exponent, ``!``, ``\\frac`` / ``\\dfrac`` / ``\\tfrac`` (also ``\\frac12``),
  ``\\sqrt{}`` and ``\\sqrt[n]{}``, parentheses and braces (``\\left`` / ``\\right`` ignored), ``\\pi``, ``e``,
  ``\\infty``, one- or two-letter lower-case variables;
- finite sets ``\\{...\\}`` and bare lists ``1, 2``; intervals ``(a, b]`` (math-verify reads ``(a, b)`` as an open
  interval too); unions with ``\\cup``.

Anything else (relations, functions, text, matrices, percentages, units, degrees, ``1,000``) raises
:class:`Uncovered` and goes to math-verify unchanged. :func:`to_sympy` evaluates a tree to the sympy value
math-verify would compare (evaluated rather than held unevaluated, which changes no equality decision) unless it
would exceed the size budget (:class:`TooBig`), in which case :mod:`creditgym.verifiers.math.guard` decides.

Conventions copied from math-verify: a decimal is ``sympy.Number(text)`` (a ``Float`` whose precision follows its
digits), except ``0.5``, which math-verify's normaliser turns into ``\\frac{1}{2}``; variables are real symbols.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Any

import sympy

__all__ = [
    "MAX_DEPTH",
    "MAX_EXACT_BITS",
    "MAX_SYMBOLIC_EXPONENT",
    "Node",
    "TooBig",
    "Uncovered",
    "parse",
    "to_sympy",
]

#: Largest exact number (in bits, about 300,000 digits) built outright; larger values are left to the guard.
MAX_EXACT_BITS = 1 << 20
#: Largest exponent of a non-numeric base (``x^{10000}``) handed to sympy.
MAX_SYMBOLIC_EXPONENT = 10_000
#: Deepest nesting of groups the parser follows (a continued fraction 400 levels deep); deeper is ``Uncovered``.
MAX_DEPTH = 400
_MAX_TOKENS = 20_000
_MAX_DIGITS = 4300  # Python's int-from-string limit; sympy refuses longer literals too

#: ``(tag, *children)``: ("num", text) ("sym", name) ("pi",) ("e",) ("inf",) ("neg", x) ("add", x, y, ...)
#: ("mul", x, y, ...) ("div", x, y) ("pow", base, exp) ("fact", x) ("root", x, n) ("set", x, ...)
#: ("interval", lo, hi, left_open, right_open) ("union", x, y, ...)
Node = tuple[Any, ...]


class Uncovered(Exception):
    """The text is not in the subset this parser reads (math-verify will parse it)."""


class TooBig(Exception):
    """Building the value exactly would exceed the size budget."""


_TOKEN_RE = re.compile(
    r"""
    (?P<skip>\s+|\\[,;:!>\ ]|\\q?quad(?![a-zA-Z])|\\(?:left|right|big|Big|bigg|Bigg)(?![a-zA-Z])|\\displaystyle)
    | (?P<num>\d+(?:\.\d+)?)
    | (?P<cmd>\\[a-zA-Z]+)
    | (?P<setbrace>\\[{}])
    | (?P<letters>[a-zA-Z]+)
    | (?P<op>[-+*/^!(){}\[\],.=<>|_'"&$%;:?@~#`])
    """,
    re.X,
)
_FRACS = {"\\frac", "\\dfrac", "\\tfrac"}
_TIMES = {"*", "\\cdot", "\\times"}
_DIVIDE = {"/", "\\div"}
_TRIG = {"\\sin", "\\cos", "\\tan", "\\cot", "\\sec", "\\csc"}
_ATOM_START_CMDS = {*_FRACS, *_TRIG, "\\sqrt", "\\pi", "\\infty"}
# Relation tokens: "<" means strict, "<=" not.
_RELATIONS = {"<": "<", ">": ">", "\\lt": "<", "\\gt": ">", "\\le": "<=", "\\leq": "<=", "\\leqslant": "<=",
              "\\ge": ">=", "\\geq": ">=", "\\geqslant": ">="}  # fmt: skip
_TRIG_FUNCTIONS = {
    "\\sin": sympy.sin, "\\cos": sympy.cos, "\\tan": sympy.tan,
    "\\cot": sympy.cot, "\\sec": sympy.sec, "\\csc": sympy.csc,
}  # fmt: skip


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    for match in _TOKEN_RE.finditer(text):
        if match.start() != pos:
            raise Uncovered(f"character {text[pos]!r}")
        pos = match.end()
        kind = match.lastgroup
        if kind == "skip":
            continue
        assert kind is not None
        out.append((kind, match.group()))
        if len(out) > _MAX_TOKENS:
            raise Uncovered("too many tokens")
    if pos != len(text):
        raise Uncovered(f"character {text[pos]!r}")
    return out


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = _tokens(text)
        self.i = 0
        self.depth = 0
        self.seen: set[str] = set()  # "i" and "sym" once the imaginary unit or a variable has been read

    # ---------------------------------------------------------------------------------------- helpers

    def peek(self, offset: int = 0) -> tuple[str, str]:
        j = self.i + offset
        return self.tokens[j] if j < len(self.tokens) else ("end", "")

    def take(self, value: str | None = None) -> str:
        kind, tok = self.peek()
        if kind == "end" or (value is not None and tok != value):
            raise Uncovered(f"expected {value or 'more'}, got {tok or 'the end'}")
        self.i += 1
        return tok

    def enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise Uncovered(f"nested deeper than {MAX_DEPTH} levels")

    # ---------------------------------------------------------------------------------------- grammar

    def top(self) -> Node:
        items = [self.union()]
        if self.peek()[1] in _RELATIONS or self.peek()[1] == "=":
            items = [self.relation(items[0])]
        while self.peek()[1] == ",":
            self.take(",")
            items.append(self.union())
        if self.peek()[0] != "end":
            raise Uncovered(f"unexpected {self.peek()[1]!r}")
        if len(items) == 1:
            return items[0]
        if any(n[0] in ("set", "interval", "union") for n in items):
            raise Uncovered("a list of sets")
        return ("set", *items)

    def relation(self, first: Node) -> Node:
        """``lhs = rhs``, or a chain of inequalities ``a < x <= b`` (its solution set is built later)."""
        if self.take() == "=":
            if self.peek()[1] in _RELATIONS or self.peek()[1] == "=":
                raise Uncovered("a chain with =")
            rhs = self.expr()
            if self.peek()[1] in _RELATIONS or self.peek()[1] == "=":
                raise Uncovered("a chain with =")
            return ("eq", first, rhs)
        self.i -= 1
        chain: list[Any] = [first]
        while self.peek()[1] in _RELATIONS:
            chain += [_RELATIONS[self.take()], self.expr()]
        if self.peek()[1] == "=":
            raise Uncovered("a chain with =")
        return ("rel", *chain)

    def union(self) -> Node:
        parts = [self.item()]
        while self.peek()[1] == "\\cup":
            self.take()
            parts.append(self.item())
        if len(parts) > 1:
            if any(p[0] not in ("set", "interval") for p in parts):
                raise Uncovered("a union of non-sets")
            return ("union", *parts)
        return parts[0]

    def item(self) -> Node:
        tok = self.peek()[1]
        if tok == "\\{":
            return self.finite_set()
        if tok in ("(", "["):
            interval = self.try_interval()
            if interval is not None:
                return interval
        return self.expr()

    def finite_set(self) -> Node:
        self.take("\\{")
        elems: list[Node] = []
        while self.peek()[1] != "\\}":
            elems.append(self.expr())
            if self.peek()[1] == ",":
                self.take(",")
            elif self.peek()[1] != "\\}":
                raise Uncovered("a set element")
        self.take("\\}")
        return ("set", *elems)

    def try_interval(self) -> Node | None:
        """``(a, b]``-style intervals; ``None`` (and no tokens used) when the bracket is plain grouping."""
        start = self.i
        opener = self.take()
        self.enter()
        lo = self.expr()
        if self.peek()[1] != ",":
            self.i, self.depth = start, self.depth - 1
            return None
        self.take(",")
        hi = self.expr()
        closer = self.take()
        self.depth -= 1
        if closer not in (")", "]"):
            raise Uncovered("a tuple, not an interval")
        return ("interval", lo, hi, opener == "(", closer == ")")

    def expr(self) -> Node:
        self.enter()
        terms: list[Node] = []
        sign = self.peek()[1]
        if sign in ("+", "-"):
            self.take()
        first = self.term()
        terms.append(("neg", first) if sign == "-" else first)
        while self.peek()[1] in ("+", "-"):
            op = self.take()
            term = self.term()
            terms.append(("neg", term) if op == "-" else term)
        self.depth -= 1
        return terms[0] if len(terms) == 1 else ("add", *terms)

    def term(self) -> Node:
        node = self.power()
        while True:
            kind, tok = self.peek()
            if tok in _TIMES:
                self.take()
                node = ("mul", node, self.power())
            elif tok in _DIVIDE:
                self.take()
                node = ("div", node, self.power())
            elif self.starts_atom(kind, tok) and kind != "num":
                right = self.power()
                left = node[-1] if node[0] == "mul" else node
                if _literal(left) and _literal(
                    right
                ):  # math-verify reads 2\frac{1}{2} as 2 + 1/2, (2)(3) as 5
                    raise Uncovered("two numbers side by side (a mixed number to math-verify)")
                node = ("mul", node, right)
            else:
                return node

    @staticmethod
    def starts_atom(kind: str, tok: str) -> bool:
        return kind in ("num", "letters") or tok in ("(", "{") or tok in _ATOM_START_CMDS

    def power(self) -> Node:
        base = self.postfix()
        if self.peek()[1] == "^":
            self.take()
            if self.peek()[1] == "^":
                raise Uncovered("a^b^c")
            exponent = self.exponent()
            base = ("pow", base, exponent)
            if self.peek()[1] in ("^", "!"):
                raise Uncovered("a^b^c or a^b!")
        return base

    def exponent(self) -> Node:
        kind, tok = self.peek()
        if tok == "{":
            return self.group()
        if kind == "num" and len(tok) == 1:
            self.take()
            return ("num", tok)
        if kind == "letters" and len(tok) == 1:
            return self.atom()
        if tok == "\\pi":
            return self.atom()
        raise Uncovered("an exponent that is not braced or one character")

    def postfix(self) -> Node:
        node = self.atom()
        while self.peek()[1] == "!":
            self.take()
            node = ("fact", node)
        return node

    def group(self, opener: str = "{", closer: str = "}") -> Node:
        self.take(opener)
        inner = self.expr()
        self.take(closer)
        return inner

    def frac_argument(self) -> Node:
        kind, tok = self.peek()
        if tok == "{":
            return self.group()
        if kind == "num":  # \frac12 means \frac{1}{2}: one digit per argument
            self.take()
            if len(tok) > 1:
                self.tokens.insert(self.i, ("num", tok[1:]))
                tok = tok[0]
            return ("num", tok)
        raise Uncovered("a \\frac argument")

    def trig_argument(self) -> Node:
        """``\\sin x``, ``\\sin(...)``, ``\\sin{...}``, ``\\sin\\frac{\\pi}{3}``, ``\\sin 60^\\circ`` (degrees)."""
        kind, tok = self.peek()
        if tok == "^":
            raise Uncovered("a power of a trigonometric function")
        if kind == "num" and self.peek(1)[1] == "^":
            number = self.take()
            self.take("^")
            if self.peek()[1] == "{":
                self.take("{")
                self.take("\\circ")
                self.take("}")
            else:
                self.take("\\circ")
            return ("mul", ("div", ("num", number), ("num", "180")), ("pi",))
        if tok in ("(", "{") or tok in _FRACS or kind in ("num", "letters") or tok == "\\pi":
            argument = self.group(tok, ")" if tok == "(" else "}") if tok in ("(", "{") else self.atom()
            if self.peek()[1] in ("^", "!"):
                raise Uncovered("an ambiguous trigonometric argument")
            return argument
        raise Uncovered("a trigonometric argument")

    def atom(self) -> Node:
        kind, tok = self.peek()
        if kind == "num":
            self.take()
            if len(tok.split(".")[0]) > _MAX_DIGITS:
                raise Uncovered("a number literal longer than 4,300 digits")
            return ("num", tok)
        if kind == "letters":
            if (
                tok == "i"
            ):  # the imaginary unit (math-verify too, once its input is rewritten; see the worker)
                self.take()
                self.seen.add("i")
                return ("i",)
            if len(tok) > 2 or not tok.islower() or "i" in tok:
                raise Uncovered("a word, an upper-case letter, or i next to another letter")
            self.take()
            if self.peek()[1] == "(":  # f(x) is a function to math-verify, x(x+1) a product: left to it
                raise Uncovered("a letter before a parenthesis")
            nodes = [("e",) if ch == "e" else ("sym", ch) for ch in tok]
            if any(n[0] == "sym" for n in nodes):
                self.seen.add("sym")
            return nodes[0] if len(nodes) == 1 else ("mul", *nodes)
        if tok in _TRIG:
            self.take()
            return ("trig", tok, self.trig_argument())
        if tok == "(":
            return self.group("(", ")")
        if tok == "{":
            return self.group()
        if tok in _FRACS:
            self.take()
            return ("div", self.frac_argument(), self.frac_argument())
        if tok == "\\sqrt":
            self.take()
            index: Node = ("num", "2")
            if self.peek()[1] == "[":
                index = self.group("[", "]")
            kind, arg = self.peek()
            if arg == "{":
                return ("root", self.group(), index)
            if kind == "num" and len(arg) == 1:
                self.take()
                return ("root", ("num", arg), index)
            raise Uncovered("a \\sqrt argument")
        if tok == "\\pi":
            self.take()
            return ("pi",)
        if tok == "\\infty":
            self.take()
            return ("inf",)
        raise Uncovered(f"token {tok!r}")


def _literal(node: Node) -> bool:
    """A number written out: ``3``, ``-3``, ``\\frac{1}{2}`` (math-verify adds such neighbours instead of
    multiplying them)."""
    if node[0] == "neg":
        return _literal(node[1])
    if node[0] == "div":
        return _literal(node[1]) and _literal(node[2])
    return node[0] == "num"


def parse(text: str) -> Node:
    """The syntax tree of ``text``; raises :class:`Uncovered` outside the subset (see the module docstring)."""
    if "," in text and re.search(r",\d{3}(?!\d)", text):
        raise Uncovered("1,000 is a thousands separator to math-verify")
    parser = _Parser(text)
    tree = parser.top()
    if parser.seen == {"i", "sym"}:
        raise Uncovered("a complex expression with variables (math-verify makes its variables complex)")
    return tree


# ------------------------------------------------------------------------------------------------ evaluation


def _bits(value: Any) -> float:
    """log2 of |value| for a sympy number (rough, for the budget), 0 for zero or non-numbers."""
    if isinstance(value, sympy.Integer):
        return float(abs(int(value)).bit_length())
    if isinstance(value, sympy.Rational):
        return float(max(abs(int(value.p)).bit_length(), int(value.q).bit_length()))
    if isinstance(value, sympy.Float):
        return 64.0
    return 0.0


def _number(text: str) -> Any:
    return sympy.Float(text) if "." in text else sympy.Integer(int(text))


def _pow(base: Any, exponent: Any) -> Any:
    if not base.free_symbols and not exponent.free_symbols and exponent.is_number and base.is_number:
        if exponent.is_Rational:
            if _bits(exponent) > 64:  # even 2^(2^64) is far past the budget
                raise TooBig("a power with a huge exponent")
            magnitude = abs(float(exponent)) * max(_bits(base), 1.0) if abs(exponent) > 1 else 0.0
            if magnitude > MAX_EXACT_BITS:
                raise TooBig("a power too large to build exactly")
        elif exponent.is_comparable and abs(float(sympy.N(exponent, 15))) > 1e6:
            raise TooBig("a power with a huge irrational exponent")
    elif exponent.is_number and exponent.is_comparable and abs(exponent) > MAX_SYMBOLIC_EXPONENT:
        raise TooBig("a variable raised to a huge power")
    return sympy.Pow(base, exponent)


def _factorial(value: Any) -> Any:
    if value.is_Integer and value >= 0:
        n = int(value)
        if n > 2 and n * math.log2(n) > MAX_EXACT_BITS:
            raise TooBig("a factorial too large to build exactly")
        return sympy.factorial(value)
    if value.free_symbols:
        return sympy.factorial(value)
    raise Uncovered("a factorial of a non-integer")


def _solution_set(node: Node) -> Any:
    """The interval a chain of inequalities in one variable describes (``a < x <= b``, ``x > a``, ``a >= x``).

    math-verify, comparing an inequality with an interval, takes the inequality's solution set too.
    """
    terms = [_value(t) for t in node[1::2]]
    ops = list(node[2::2])
    variables = [i for i, t in enumerate(terms) if isinstance(t, sympy.Symbol)]
    if len(variables) != 1 or any(
        not (t.is_comparable or t.is_infinite) for i, t in enumerate(terms) if i != variables[0]
    ):
        raise Uncovered("an inequality that is not one variable against numbers")
    if len(set(op[0] for op in ops)) != 1 or len(terms) > 3 or (len(terms) == 3 and variables[0] != 1):
        raise Uncovered("a mixed or unusual chain of inequalities")
    increasing = ops[0][0] == "<"
    if not increasing:  # read "b > x > a" as "a < x < b"
        terms, ops = terms[::-1], ops[::-1]
    v = variables[0] if increasing else len(terms) - 1 - variables[0]
    lo, left_open = (terms[0], ops[0] in ("<", ">")) if v == 1 else (-sympy.oo, True)
    hi, right_open = (terms[v + 1], ops[v] in ("<", ">")) if v + 1 < len(terms) else (sympy.oo, True)
    return sympy.Interval(lo, hi, left_open, right_open)


def to_sympy(node: Node) -> Any:
    """The sympy value of ``node``, evaluated; raises :class:`TooBig` past the size budget."""
    if node == ("num", "0.5"):  # math-verify's normaliser rewrites an answer that is exactly 0.5 as 1/2
        return sympy.Rational(1, 2)
    return _value(node)


def _rational(node: Node) -> Fraction | None:
    """The exact value of a tree of integer literals, ``+ - * /`` and integer powers (``None`` otherwise)."""
    tag = node[0]
    if tag == "num":
        return None if "." in node[1] else Fraction(int(node[1]))
    if tag == "neg":
        inner = _rational(node[1])
        return None if inner is None else -inner
    if tag in ("add", "mul"):
        values = [_rational(child) for child in node[1:]]
        if any(v is None for v in values):
            return None
        total = values[0]
        for v in values[1:]:
            total = total + v if tag == "add" else total * v  # type: ignore[operator]
            if _fraction_bits(total) > MAX_EXACT_BITS:  # type: ignore[arg-type]
                return None
        return total
    if tag == "div":
        num, den = _rational(node[1]), _rational(node[2])
        return None if num is None or not den else num / den
    return None


def _fraction_bits(value: Fraction) -> int:
    return max(abs(value.numerator).bit_length(), value.denominator.bit_length())


def _value(node: Node) -> Any:
    tag = node[0]
    if tag in ("add", "mul", "div", "neg"):  # plain arithmetic on integers: Python's Fraction, 20x faster
        exact = _rational(node)
        if exact is not None:
            return sympy.Rational(exact.numerator, exact.denominator)
    if tag == "num":
        return _number(node[1])
    if tag == "sym":
        return sympy.Symbol(node[1], real=True)
    if tag == "pi":
        return sympy.pi
    if tag == "i":
        return sympy.I
    if tag == "trig":
        argument = _value(node[2])
        if argument.free_symbols:
            raise Uncovered("a trigonometric function of a variable")
        return _TRIG_FUNCTIONS[node[1]](argument)
    if tag == "eq":
        return sympy.Eq(_value(node[1]), _value(node[2]), evaluate=False)
    if tag == "rel":
        return _solution_set(node)
    if tag == "e":
        return sympy.E
    if tag == "inf":
        return sympy.oo
    if tag == "neg":
        return -_value(node[1])
    if tag == "add":
        return sympy.Add(*[_value(child) for child in node[1:]])
    if tag == "mul":
        return sympy.Mul(*[_value(child) for child in node[1:]])
    if tag == "div":
        denominator = _value(node[2])
        if denominator == 0:
            raise Uncovered("division by zero")
        return _value(node[1]) / denominator
    if tag == "pow":
        return _pow(_value(node[1]), _value(node[2]))
    if tag == "fact":
        return _factorial(_value(node[1]))
    if tag == "root":
        index = _value(node[2])
        if not (index.is_Integer and index > 0):
            raise Uncovered("a root of non-integer index")
        return _pow(_value(node[1]), sympy.Rational(1, int(index)))
    if tag == "set":
        return sympy.FiniteSet(*[_value(child) for child in node[1:]])
    if tag == "interval":
        lo, hi = _value(node[1]), _value(node[2])
        if not (lo.is_comparable or lo.is_infinite) or not (hi.is_comparable or hi.is_infinite):
            raise Uncovered("an interval with symbolic ends")
        return sympy.Interval(lo, hi, node[3], node[4])
    if tag == "union":
        return sympy.Union(*[_value(child) for child in node[1:]])
    raise Uncovered(f"node {tag}")
