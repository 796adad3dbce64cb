"""The Output page: where the LoRA goes, its format and save precision, Verify."""
