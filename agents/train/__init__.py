"""Training: the policy and its backends, rollouts, losses, the loop (`trainer`), checkpoints, config and flags."""
