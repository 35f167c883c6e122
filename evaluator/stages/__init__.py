"""The stages of a verdict, in the words of `Verdict.STAGES`: parse, screen, compile, and the device stage (load,
verify, time, profile) in `device/`. Each runs in the evaluator's own process and asks workers for what needs torch."""
