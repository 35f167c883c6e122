"""Documents: a Python source analysed with `ast` into the modules it holds (step 1 of the flow)."""

from .analysis import Analysis, FunctionInfo, ModuleInfo, Span, analyse

__all__ = ["Analysis", "FunctionInfo", "ModuleInfo", "Span", "analyse"]
