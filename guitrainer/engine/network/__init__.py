"""The trained network: LoRA and its variants (LoCon, LoHa, LoKr, DoRA), their key names, the clients' merge rules, fp8 layer casting."""
