"""Base models: loading a diffusers folder, a single file, a hub id or the demo; the VAE; writing single-file layouts."""
