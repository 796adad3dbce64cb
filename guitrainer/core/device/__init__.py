"""The device: what this machine can do for training (the probe, GPU facts, which GPU a run uses, the environment check)."""
