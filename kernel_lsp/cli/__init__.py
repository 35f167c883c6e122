"""The `kernel-lsp` command and its subcommands, one module each: the shell on top of everything else (nothing
below imports it)."""

from .main import build_parser, main, settings_from_args

__all__ = ["build_parser", "main", "settings_from_args"]
