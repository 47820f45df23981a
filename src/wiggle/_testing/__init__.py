"""The test kit behind ``wiggle.testing``: a virtual clock that skips, an environment, helpers.

- skipping.py     TimeSkipper: is every live instance waiting on time? then jump to the next due moment
- environment.py  WorkflowEnvironment: an embedded server on a VirtualClock, in-process workers, helpers
- diagnosis.py    Diagnosis: why an instance is still running when a wait gives up (the TimeoutError's words)
- arguments.py    the environment's arguments checked: blueprints, server settings, durations of virtual time
- sync.py         SyncWorkflowEnvironment: the same from plain sync code (a loop in a thread)
- helpers.py      mock_step (replace one step's function), the path an instance took
"""
