"""Verify: prove a written LoRA file loads elsewhere and merges to what was trained."""
