"""Prompt templates as data (Jinja2). Installed as the package `kernel_lsp.prompts`; a workspace can override
any template by putting a file of the same name in its `prompts_dir`."""
