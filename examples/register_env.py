"""Register your own verifier-backed token-level env and step it: `python examples/register_env.py`."""

import gymnasium as gym

from creditgym.envs import TokenEnv, TurnOutcome, load_tokenizer, render_chat
from creditgym.verifiers import Verdict

TOKENIZER = load_tokenizer()  # the bundled one; any Hugging Face tokenizer with a chat template works


def verify_reverse(response: str, word: str) -> Verdict:  # your verifier: any function returning a Verdict
    ok = response.strip() == word[::-1]
    return Verdict(score=float(ok), status="correct" if ok else "wrong", details={"expected": word[::-1]})


class ReverseEnv(TokenEnv):
    """Reply with the given word spelled backwards."""

    def __init__(self, max_new_tokens: int = 16) -> None:
        super().__init__(TOKENIZER, max_new_tokens=max_new_tokens)  # stops at EOS / end of turn

    def _begin_episode(self, options):
        self.word = str(self.np_random.choice(["apple", "river", "stone", "cloud", "tiger"]))
        return render_chat(TOKENIZER, [{"role": "user", "content": f"Reverse the word: {self.word}"}]), {}

    def _end_turn(self, budget_exhausted):
        verdict = verify_reverse(self.response_text(), self.word)
        return TurnOutcome(verdict.score, not budget_exhausted, budget_exhausted, info={"verdict": verdict})


gym.register("myorg/Reverse-v0", entry_point=ReverseEnv)

if __name__ == "__main__":
    env = gym.make("myorg/Reverse-v0")
    env.reset(seed=0)
    word = env.unwrapped.word
    for token in TOKENIZER(word[::-1])["input_ids"] + [TOKENIZER.eos_token_id]:  # one step = one token
        obs, reward, terminated, truncated, info = env.step(token)
    print(f"word={word!r} reward={reward} terminated={terminated} verdict={info['verdict'].status}")
