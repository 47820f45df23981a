"""The conformance suite: docs/semantics.md as tests, run for every store and every execution mode."""
