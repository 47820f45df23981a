"""The end-to-end benchmark (``wiggle bench``, ``python bench/e2e.py``), one job per module.

- ``e2e``        the entry point: ``main(argv)`` runs every mode in turn and prints the report
- ``arguments``  the flags and their WIGGLE_* defaults (src/wiggle/cli.py hands argv over as is)
- ``processes``  the subprocesses (server, workers): start, talk JSON lines, CPU, stop, logs
- ``worker``     the subprocesses' side: the server (with its store probe) and worker roles, the workflow
- ``pgstats``    PostgreSQL: the benchmark's own database, its counters, backend CPU, sampled waits
- ``deploy``     one mode's server(s) and worker processes (start, go, counters, stop)
- ``drain``      one mode's timed drain (submission, the window, verification, figures)
- ``submit``     client threads starting instances inside the window (``--submit during``)
- ``latency``    the latency mode (``--latency N``): one instance at a time, start -> result
- ``verify``     every instance COMPLETED with exactly the expected context
- ``figures``    percentiles; the drain's, the starts' and the latency mode's figures
- ``progress``   the progress line on stderr
- ``probe``      the machine's speed before and after a run (a fixed Python loop, timed)
- ``report``     the tables and the JSON document
"""
