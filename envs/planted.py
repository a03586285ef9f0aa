"""``creditgym/Planted-v0``: an exact credit testbed. The reward depends on a few known response slots only, so the
true advantage of every token follows from the task and the policy's own probabilities (`exact_advantages`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from creditgym.envs.core import TokenEnv, TurnOutcome
from creditgym.envs.tokenizer import BUNDLED, render_prompt, resolve_tokenizer
from creditgym.verifiers.verdict import Verdict

__all__ = [
    "LAYOUTS",
    "MATCHES",
    "PlantedEnv",
    "PlantedTask",
    "accepted",
    "exact_advantages",
    "planted_reward",
]

MATCHES = (
    "digit",
    "parity",
)  # what a decisive slot accepts: its one digit token, or any token of its id's parity
LAYOUTS = ("lead", "random")  # where the slots are: the first two response tokens, or two drawn positions


@dataclass(frozen=True)
class PlantedTask:
    """One planted task: two operands, the decisive slots and the digit each one must hold.

    Attributes:
        a, b: the operands shown in the prompt, digits 0-9.
        slots: 0-based positions in the response of the decisive tokens, strictly increasing: the planted
            intermediate value ``m = a * b mod 10`` first, then the final answer ``(m + a) mod 10``.
        digits: the digit each slot must hold, ``(m, (m + a) mod 10)``.
    """

    a: int
    b: int
    slots: tuple[int, ...]
    digits: tuple[int, ...]

    @classmethod
    def draw(cls, rng: np.random.Generator, response_length: int, layout: str = "lead") -> PlantedTask:
        """A task drawn with ``rng`` (the env's seeded ``np_random``): operands, and two distinct slots (the
        first two tokens with ``layout="lead"``, two drawn positions with ``"random"``)."""
        a, b = (int(x) for x in rng.integers(0, 10, size=2))
        drawn = tuple(sorted(int(s) for s in rng.choice(response_length, size=2, replace=False)))
        slots = (0, 1) if layout == "lead" else drawn
        m = a * b % 10
        return cls(a, b, slots, (m, (m + a) % 10))

    def question(self, match: str = "digit") -> str:
        """The prompt's text: where each value goes, and (``match="parity"``) that only its token's parity counts."""
        m, ans = (f"token {s + 1}" for s in self.slots)
        if match == "parity":
            return (
                f"a={self.a} b={self.b}. As {m} write a token whose id has the parity of m = a*b mod 10, and as "
                f"{ans} one whose id has the parity of (m+a) mod 10; every other token is free."
            )
        return (
            f"a={self.a} b={self.b}. Write m = a*b mod 10 as {m} and (m+a) mod 10 as {ans}; "
            "every other token is free."
        )


def accepted(token: int, required: int, match: str = "digit") -> bool:
    """Whether a decisive slot that requires ``required`` accepts ``token``: the same id (``"digit"``) or an id of
    the same parity (``"parity"``)."""
    if match == "parity":
        return int(token) % 2 == int(required) % 2
    return int(token) == int(required)


def planted_reward(
    response: Sequence[int], slots: Sequence[int], required: Sequence[int], match: str = "digit"
) -> float:
    """1.0 when every decisive slot ``slots[k]`` of ``response`` (token ids) accepts its token (`accepted` of
    ``required[k]`` under ``match``), else 0.0.

    Reads nothing but those positions: any token elsewhere (the filler) leaves the reward unchanged.
    """
    ok = all(
        s < len(response) and accepted(response[s], r, match) for s, r in zip(slots, required, strict=True)
    )
    return 1.0 if ok else 0.0


def exact_advantages(
    response_length: int, slots: Sequence[int], hit: Sequence[bool], p_hit: Sequence[float]
) -> np.ndarray:
    """The exact per-token advantage ``A(t) = V(prefix + y_t) - V(prefix)`` of one Planted episode, (L,) float64.

    ``V(prefix)`` is the probability, under the policy, that the rest of the response fills every remaining
    decisive slot correctly (the reward is 1 exactly then). With ``S_k = prod_{j >= k} p_hit[j]`` (``S_K = 1``)::

        V(prefix before slot k) = S_k          if every slot j < k was hit, else 0
        A(slot k) = hit[k] * S_{k+1} - S_k     if every slot j < k was hit, else 0
        A(filler) = 0

    so ``sum_t A(t) = R - V(prompt) = R - S_0``.

    Assumes (and is exact under): the policy's probability of writing the required token at slot k depends on
    the prompt and on which earlier decisive slots were hit, not on the filler tokens. Then a filler token cannot
    change any ``V``. For a language model whose decisive probabilities do move with the filler this is the
    truth of the policy that keeps ``p_hit`` fixed (the filler's own effect on later slots is left out).

    Args:
        response_length: L, the number of response tokens (the env's ``max_new_tokens``).
        slots: (K,) the decisive positions, strictly increasing, in ``[0, L)``.
        hit: (K,) whether the sampled token at ``slots[k]`` is the required one.
        p_hit: (K,) ``p_hit[k] = pi(required token at slot k | prompt, every slot j < k hit)`` in [0, 1]. Along a
            path that hit every earlier slot it is the policy's probability at that step; after a miss, score the
            response with the earlier slots set to their required tokens (under the assumption, the filler does
            not matter).

    Raises:
        ValueError: mismatched lengths, slots not increasing or outside ``[0, L)``, a probability outside [0, 1].
    """
    s = np.asarray(slots, dtype=np.int64)
    h = np.asarray(hit, dtype=bool)
    p = np.asarray(p_hit, dtype=np.float64)
    if not (s.ndim == h.ndim == p.ndim == 1 and len(s) == len(h) == len(p)):
        raise ValueError(
            f"exact_advantages: slots, hit and p_hit must be 1-D of one length K, got {s.shape}, {h.shape}, {p.shape}"
        )
    if len(s) and (s[0] < 0 or s[-1] >= response_length or (np.diff(s) <= 0).any()):
        raise ValueError(
            f"exact_advantages: slots must be strictly increasing in [0, {response_length}), got {s.tolist()}"
        )
    if not ((p >= 0) & (p <= 1)).all():
        raise ValueError(f"exact_advantages: p_hit must lie in [0, 1], got {p.tolist()}")
    suffix = np.append(np.cumprod(p[::-1])[::-1], 1.0)  # (K + 1,) S_k
    alive = np.concatenate([[True], np.cumprod(h)[:-1].astype(bool)]) if len(h) else h  # every j < k hit
    out = np.zeros(response_length, dtype=np.float64)
    out[s] = np.where(alive, h * suffix[1:] - suffix[:-1], 0.0)
    return out


class PlantedEnv(TokenEnv):
    """A task whose reward rests on two known response tokens: a planted intermediate value and the answer.

    Description:
        Each reset draws, from the env's seeded RNG, two operands ``a, b`` and (``layout="random"``) two distinct
        response slots; by default (``"lead"``) the slots are the first two response tokens. The
        prompt (the tokenizer's chat template) asks for ``m = a * b mod 10`` at the first slot and
        ``(m + a) mod 10`` at the second, as single digit tokens; every other token of the response is filler.
        The response always runs exactly ``max_new_tokens`` tokens (no stop token ends it early, so a filler
        token cannot change where the slots are). The reward is 1 when both slots hold their digit
        (`planted_reward`), so the true advantage of every token is known exactly (`exact_advantages`): 0 on
        every filler token.

    Action Space:
        ``Discrete(V)`` with V = ``len(tokenizer)`` (a 1-D array of ids steps a chunk, see ``step_chunk``).

    Observation Space:
        ``Dict(tokens=Sequence(Discrete(V)), sources=Sequence(Discrete(3)))``: the whole context so far.

    Rewards:
        0 on every step except the last policy token, which gets 1.0 (both slots right) or 0.0.
        ``info["verdict"]`` holds the `Verdict`; ``info["hits"]`` says which slots were right.

    Episode End:
        ``terminated`` after exactly ``max_new_tokens`` policy tokens (the verdict); never truncated.

    Args:
        tokenizer: A Hugging Face tokenizer with a chat template, or a name/path (default: the bundled one); its
            digits 0-9 must be single tokens.
        max_new_tokens: L, the response length, ``>= 2`` (two slots).
        match: What a slot accepts, one of `MATCHES`: ``"digit"`` (its one digit token) or ``"parity"``.
        layout: Where the slots are, one of `LAYOUTS`: ``"lead"`` (the first two response tokens: no filler
            comes before a slot, so the true advantage is exact for any policy and every filler token's is 0) or
            ``"random"`` (two drawn positions: exact only for a policy whose slot probabilities ignore the filler
            before them, see `exact_advantages`; a language model's do not).
        render_mode: ``"ansi"`` or None.
    """

    def __init__(
        self,
        tokenizer: Any = BUNDLED,
        *,
        max_new_tokens: int = 16,
        match: str = "digit",
        layout: str = "lead",
        render_mode: str | None = None,
    ) -> None:
        if match not in MATCHES:
            raise ValueError(f"Planted-v0: match must be one of {MATCHES}, got {match!r}")
        if layout not in LAYOUTS:
            raise ValueError(f"Planted-v0: layout must be one of {LAYOUTS}, got {layout!r}")
        self.match, self.layout = match, layout
        tok = resolve_tokenizer(tokenizer)
        super().__init__(tok, max_new_tokens=max_new_tokens, stop_token_ids=(), render_mode=render_mode)
        if self.max_new_tokens < 2:
            raise ValueError(
                f"Planted-v0 needs max_new_tokens >= 2 (two decisive slots), got {max_new_tokens}"
            )
        ids = [tok.encode(str(d), add_special_tokens=False) for d in range(10)]
        if any(len(x) != 1 for x in ids):
            raise ValueError(
                f"Planted-v0 needs a tokenizer whose digits 0-9 are single tokens; {tok.name_or_path!r} gives {ids}"
            )
        self.digit_ids = tuple(int(x[0]) for x in ids)
        self.task: PlantedTask | None = None

    @property
    def current_task(self) -> PlantedTask:
        """The task of the current episode; raises before the first ``reset``."""
        if self.task is None:
            raise RuntimeError("PlantedEnv: call reset() first")
        return self.task

    @property
    def decisive_slots(self) -> tuple[int, ...]:
        """0-based response positions the reward reads."""
        return self.current_task.slots

    @property
    def required_tokens(self) -> tuple[int, ...]:
        """The digit token of each decisive slot: the one token it accepts (``"digit"``), or one of them."""
        return tuple(self.digit_ids[d] for d in self.current_task.digits)

    def decisive_masks(self, vocab_size: int) -> np.ndarray:
        """(K, V) bool: ``[k, v]`` is whether decisive slot k accepts token id v (V = ``vocab_size``, e.g. the
        model's logits width)."""
        ids = np.arange(vocab_size)
        if self.match == "parity":
            return np.stack([ids % 2 == r % 2 for r in self.required_tokens])
        return np.stack([ids == r for r in self.required_tokens])

    def slot_hits(self, response: Sequence[int]) -> list[bool]:
        """Per decisive slot, whether ``response`` (token ids) fills it."""
        return [
            s < len(response) and accepted(response[s], r, self.match)
            for s, r in zip(self.decisive_slots, self.required_tokens, strict=True)
        ]

    @property
    def end_of_turn_id(self) -> int:
        """EOS: a filler token here (no stop token ends the response)."""
        eos = self.tokenizer.eos_token_id
        return int(eos) if eos is not None else 0

    def oracle_response(self) -> str:
        """A correct response: ``0`` filler with the two digits at their slots (one token per digit)."""
        chars = ["0"] * self.max_new_tokens
        for s, d in zip(self.current_task.slots, self.current_task.digits, strict=True):
            chars[s] = str(d)
        return "".join(chars)

    def _begin_episode(self, options: dict[str, Any] | None) -> tuple[list[int], dict[str, Any]]:
        task = (options or {}).get("task")
        if task is None:
            task = PlantedTask.draw(self.np_random, self.max_new_tokens, self.layout)
        elif not isinstance(task, PlantedTask):
            raise TypeError(f"options['task'] must be a PlantedTask, got {type(task).__name__}")
        elif task.slots[-1] >= self.max_new_tokens:
            raise ValueError(
                f"options['task'] has slots {task.slots} outside a response of {self.max_new_tokens}"
            )
        self.task = task
        question = task.question(self.match)
        return render_prompt(self.tokenizer, question), {"slots": task.slots, "question": question}

    def _end_turn(self, budget_exhausted: bool) -> TurnOutcome:
        response = self.response_tokens()
        hits = self.slot_hits(response)
        reward = planted_reward(response, self.decisive_slots, self.required_tokens, self.match)
        verdict = Verdict(score=reward, status="correct" if reward == 1.0 else "wrong")
        info = {"verdict": verdict, "status": verdict.status, "score": reward, "hits": hits}
        return TurnOutcome(reward=reward, terminated=True, info=info)
