"""Frozen configuration dataclasses of a run (the loop, pretraining, fine-tuning), presets and overrides."""
