"""guitrainer: a desktop LoRA trainer for Stable Diffusion with mixed precision done right."""

__version__ = "0.1.0"
APP_NAME = "guitrainer"
