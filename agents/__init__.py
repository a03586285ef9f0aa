"""Agents: policies, rollouts, learning, evaluation. One subpackage per job, imported downward.

Layers, bottom to top; a module imports at module level only its own group and lower layers (checked by
tests/test_architecture.py):

0. ``study.stats``: statistics (intervals, curves), pure.
1. ``train``: the policy and its generation backends, rollouts, losses, checkpoints, config, plots.
2. ``eval``: evaluation of any agent through any env (local policy, OpenAI-compatible endpoint, scripted); and
   ``providers``: the signal providers that compute what a credit module declares (replays, teachers, critics,
   attention statistics, Monte-Carlo values), one import list in its ``__init__``. Neither imports the other.
3. ``probe``: the Monte-Carlo probe of where a module puts the credit, and its report.
4. ``train.trainer``: the training loop, which runs the providers, the credit module, evaluation and the probe.
5. ``study``: ``creditgym compare``, its results, its scheduler and Ray jobs.
"""
