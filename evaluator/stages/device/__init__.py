"""The device stage: load the candidate's build, verify it against the reference, time both with the evaluator's
own clock, and check what ran on the device."""
