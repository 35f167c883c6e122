"""Example (reference, answer) pairs shown to the model (one-shot prompts, agent retrieval).

Data files read as text by kernel_lsp.generation.prompts.PromptLibrary.example(); never import them (the answers
compile kernels at import time).
"""
