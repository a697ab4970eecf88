"""One module per advice rule; each exposes RULE (opscope.advise.finding.Rule)."""
