"""Example candidates (data for prompts and tests; importing this package runs nothing)."""
