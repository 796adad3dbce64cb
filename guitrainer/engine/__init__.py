"""Training engine: torch / diffusers / peft / accelerate / bitsandbytes. Never imports Qt."""
