"""The language server: translates between LSP and the engine (documents → tasks, verdicts → diagnostics,
hovers and edits). It never imports torch; candidate code never runs in this process."""
