"""The end-to-end benchmark (``wiggle bench``, ``python bench/e2e.py``), one job per module.

- ``e2e``        the entry point: ``main(argv)`` runs every mode in turn and prints the report
- ``arguments``  the flags and their WIGGLE_* defaults (src/wiggle/cli.py hands argv over as is)
- ``processes``  the subprocesses (server, workers): start, talk JSON lines, CPU, stop, logs
- ``worker``     the subprocesses' side: the server and worker roles, and the benchmark workflow
- ``pgstats``    PostgreSQL: the benchmark's own database, xact_commit, backend CPU, clean-up
- ``drain``      one mode's timed drain (submission, the window, verification, figures)
- ``verify``     every instance COMPLETED with exactly the expected context
- ``figures``    percentiles and the drain's figures from the counters at the window's edges
- ``progress``   the progress line on stderr
- ``report``     the tables and the JSON document
"""
