"""Grade-school word problems (``creditgym/Math-v0``, ``difficulty=7``): one or two steps, in plain words.

Each problem fills a template of :data:`TEMPLATES` with a name, an item and small whole numbers, for example
*"Mia has 7 shells. Leo gives Mia 5 more shells. How many shells does Mia have now? Answer in one short
sentence."*. A template carries its
arithmetic twice: as a Python function, which draws the numbers, and as a formula string, which
:func:`~creditgym.envs.math_tasks.generate_task` re-evaluates with sympy from the numbers shown in the question.

Numbers are redrawn until the answer is a positive whole number that differs from every number in the question,
so copying a number out of the question never scores. :data:`NUMBERS`, :data:`TWO_STEP_SHARE` and :data:`CUE`
set the difficulty; docs/envs/math.md gives the measurements they were tuned by.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import sympy

NUMBERS = (2, 9)  # smallest and largest number drawn
TWO_STEP_SHARE = 0.2  # share of problems drawn from the two-step templates
# ends every question: without it SmolLM2-135M rambles past a 96-token budget (docs/envs/math.md)
CUE = "Answer in one short sentence."
_NAMES = (
    "Mia",
    "Leo",
    "Sam",
    "Ava",
    "Noah",
    "Emma",
    "Liam",
    "Zoe",
    "Omar",
    "Lily",
    "Ravi",
    "Nora",
    "Tom",
    "Ana",
)
_ITEMS = (
    "apples",
    "books",
    "shells",
    "stickers",
    "marbles",
    "pencils",
    "cookies",
    "toy cars",
    "balloons",
    "cards",
)


@dataclass(frozen=True)
class Template:
    """A problem with slots ``{name}``, ``{other}``, ``{item}``, ``{a}``, ``{b}``, ``{c}``.

    ``formula`` is the answer over ``a``, ``b``, ``c`` for sympy; ``compute`` the same in Python, with exact
    fractions (a division that does not come out whole is redrawn). ``multiple``: ``a`` is drawn as a multiple
    of ``b`` (a whole quotient, and the quotient, not ``a``, in the range of :data:`NUMBERS`).
    """

    text: str
    formula: str
    compute: Callable[[int, int, int], Fraction]
    steps: int
    multiple: bool = False


TEMPLATES: tuple[Template, ...] = (
    Template(
        "{name} has {a} {item}. {other} gives {name} {b} more {item}. How many {item} does {name} have now?",
        "a + b",
        lambda a, b, c: Fraction(a + b),
        1,
    ),
    Template(
        "{name} had {a} {item} and gave {b} of them to {other}. How many {item} does {name} have left?",
        "a - b",
        lambda a, b, c: Fraction(a - b),
        1,
    ),
    Template(
        "{name} buys {a} bags of {item}. Each bag holds {b} {item}. How many {item} does {name} buy in all?",
        "a * b",
        lambda a, b, c: Fraction(a * b),
        1,
    ),
    Template(
        "{name} shares {a} {item} equally among {b} friends. How many {item} does each friend get?",
        "a / b",
        lambda a, b, c: Fraction(a, b),
        1,
        multiple=True,
    ),
    Template(
        "{name} has {a} {item}. {name} finds {b} more {item} and then loses {c} of them. "
        "How many {item} does {name} have now?",
        "a + b - c",
        lambda a, b, c: Fraction(a + b - c),
        2,
    ),
    Template(
        "{name} had {c} {item} and then bought {a} bags of {item} with {b} {item} in each bag. "
        "How many {item} does {name} have now?",
        "c + a * b",
        lambda a, b, c: Fraction(c + a * b),
        2,
    ),
    Template(
        "{name} has {a} {item}. {other} has {b} more {item} than {name}. How many {item} do they have together?",
        "a + (a + b)",
        lambda a, b, c: Fraction(a + a + b),
        2,
    ),
)


def generate(rng: np.random.Generator) -> tuple[str, sympy.Expr, str]:
    """One word problem: the question, its answer (from ``compute``) and the formula with the numbers filled in."""
    steps = 2 if rng.random() < TWO_STEP_SHARE else 1
    templates = [t for t in TEMPLATES if t.steps == steps]
    template = templates[int(rng.integers(len(templates)))]
    name, other = (str(n) for n in rng.choice(_NAMES, size=2, replace=False))
    item = _ITEMS[int(rng.integers(len(_ITEMS)))]
    while True:
        a, b, c = (int(n) for n in rng.integers(NUMBERS[0], NUMBERS[1] + 1, size=3))
        a = a * b if template.multiple else a
        value = template.compute(a, b, c)
        used = {a, b} | ({c} if "{c}" in template.text else set())
        if value.denominator == 1 and value > 0 and int(value) not in used:
            break
    question = f"{template.text.format(name=name, other=other, item=item, a=a, b=b, c=c)} {CUE}"
    formula = template.formula.replace("a", str(a)).replace("b", str(b)).replace("c", str(c))
    return question, sympy.Integer(int(value)), formula
