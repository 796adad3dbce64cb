"""Measuring memory: a training step's real peak, and the model tables the estimator is built from."""
