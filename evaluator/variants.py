"""The names of the input variants (see `inputs.py`), torch-free: the evaluator's parent process, which runs inside
the language server, reads them without importing torch."""

VARIANTS = ("task", "ramp", "signed", "wide")
OUT_OF_DISTRIBUTION = ("signed", "wide")
DESCRIBE = {
    "task": "the task's get_inputs()",
    "ramp": "get_inputs() scaled by a positional ramp",
    "signed": "signed normal values (not the task's own distribution)",
    "wide": "normal values times 8 (not the task's own distribution)",
}
