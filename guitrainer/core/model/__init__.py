"""The base model on paper: what a path holds (family, layout), the VAE choice, Continue from LoRA, the LoRA's layers."""
