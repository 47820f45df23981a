"""The conformance suite: SEMANTICS.md as tests, run for every store and every execution mode."""
