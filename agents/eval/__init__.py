"""Evaluation: run any agent (local policy, OpenAI-compatible endpoint, scripted) through any env, and report."""
