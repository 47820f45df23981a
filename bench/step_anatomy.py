"""Where one step's time goes on an idle system (issue #28), taken apart.

    python bench/step_anatomy.py --database-url postgresql://postgres@127.0.0.1:5432/test
    python bench/step_anatomy.py --mode SERVER --instances 500
    python bench/step_anatomy.py                      # the in-memory store

Runs a real ``wiggle server`` and one ``wiggle worker`` as subprocesses of this script, each with
timers hooked around its own code (nothing of the package is changed: the hooks wrap functions
before the command starts), then ``--instances`` instances of a ``--steps``-step workflow one
after another (start, then ``Client.wait``). Every report the worker sends (``AdvanceRun`` in
LOCAL_SYNC, ``CompleteTask`` in SERVER mode) is followed by its request id through

    worker call -> worker serializes -> server parses -> server's handler starts -> it ends
    -> server serializes the reply -> worker parses it -> the worker's call returns

and, inside the handler, the store's group commit: its connection held and, for a group read
under its locks, the read's round trip (``pipeline.sync``) and the commit's (the pipeline's exit);
for a group on the states this server kept (wiggle/_storage/postgres/state_cache.py), the one
statement that checks, writes and commits (``ChangeWriter.write_checked``). Printed: the median of each part over
the run's reports (the first tenth left out as warm-up), the median report round trip as the
worker saw it, and two yardsticks measured by the same script: a bare gRPC stream echo between
two processes and a pipelined psycopg transaction of a report's shape (BEGIN, a locking read, a
read, an UPDATE, COMMIT), with its client's CPU. The hooks cost a few microseconds a report.

Then the instance's own timeline (``timeline``), the median over the instances of each stretch
from ``Client.start`` to ``Client.wait``'s answer: the start call (to the server's start handler,
the handler, its answer back), the step's way to the worker (the poll's answer carrying it), the
reports and the worker's time between them, and the way from the last report's commit to the
waiting client. ``--request-ids`` gives every start a request id of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import functools
import itertools
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
EVENTS: list[tuple[float, str, int]] = []  # (perf_counter, what, request id or 0)


def mark(what: str, rid: int = 0) -> None:
    EVENTS.append((time.perf_counter(), what, rid))


def dump(path: str) -> None:
    with open(path, "w") as fh:
        json.dump(EVENTS, fh)


def timed(owner: Any, name: str, what: str) -> None:
    """Wrap the coroutine method ``owner.name`` with ``what``+"0" / "1" marks."""
    inner = getattr(owner, name)

    @functools.wraps(inner)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        mark(what + "0")
        try:
            return await inner(*args, **kwargs)
        finally:
            mark(what + "1")

    setattr(owner, name, wrapper)


def hook_server() -> None:
    import grpc
    import psycopg

    from wiggle._server import decoding, session
    from wiggle._storage.postgres import group_commit, writes

    tolerant = decoding._tolerant

    def parsing(parse: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
        decode = tolerant(parse)

        def hooked(data: bytes) -> Any:
            t = time.perf_counter()
            message = decode(data)
            if type(message).__name__ == "WorkerBatch":  # (a client's ClientBatch has ids of its own)
                for m in message.messages:
                    EVENTS.append((t, "s_parse", m.request_id))
            return message

        return hooked

    decoding._tolerant = parsing
    stream_handler = grpc.stream_stream_rpc_method_handler

    def handler(behavior: Any, request_deserializer: Any = None, response_serializer: Any = None) -> Any:
        def serialize(message: Any) -> bytes:
            if type(message).__name__ == "ServerBatch":
                for m in message.messages:
                    mark("s_serialize", m.request_id)
            return response_serializer(message)  # type: ignore[no-any-return]

        return stream_handler(behavior, request_deserializer, serialize)

    grpc.stream_stream_rpc_method_handler = handler
    answer = session._answer

    async def answering(dispatch: Any, message: Any, body: Any, replies: Any, protocol: Any) -> None:
        if protocol is not session.WORKER:  # a client's start: timed by s_start below
            return await answer(dispatch, message, body, replies, protocol)
        mark("s_handler0", message.request_id)
        await answer(dispatch, message, body, replies, protocol)
        mark("s_handler1", message.request_id)

    session._answer = answering
    timed(group_commit.GroupCommit, "_commit_group", "group")
    timed(psycopg.AsyncPipeline, "sync", "read_trip")
    timed(psycopg.AsyncPipeline, "__aexit__", "commit_trip")
    timed(writes.ChangeWriter, "write_checked", "checked_trip")
    from wiggle._server import instance_service

    timed(instance_service.InstanceHandlers, "start_instance", "s_start")


def hook_worker() -> None:
    from wiggle._rpc import wiggle_pb2 as pb
    from wiggle._rpc import wiggle_pb2_grpc as pb_grpc
    from wiggle._worker import stream

    init = pb_grpc.WiggleControlPlaneStub.__init__

    def stub_init(self: Any, channel: Any) -> None:
        init(self, channel)

        def serialize(batch: Any) -> bytes:
            for m in batch.messages:
                mark("w_serialize", m.request_id)
            return pb.WorkerBatch.SerializeToString(batch)  # type: ignore[no-any-return]

        def parse(data: bytes) -> Any:
            batch = pb.ServerBatch.FromString(data)
            for m in batch.messages:
                mark("w_parse", m.request_id)
                if m.WhichOneof("body") == "tasks" and len(m.tasks.tasks):
                    mark("w_task")  # a poll's answer carrying steps (timeline)
            return batch

        self.WorkerSession = channel.stream_stream(
            "/wiggle.v1.WiggleControlPlane/WorkerSession",
            request_serializer=serialize,
            response_deserializer=parse,
        )

    pb_grpc.WiggleControlPlaneStub.__init__ = stub_init
    call_with = stream.StreamTransport._call_with

    async def calling(self: Any, message: Any, name: str, timeout: float, field: str) -> Any:
        started = time.perf_counter()
        try:
            return await call_with(self, message, name, timeout, field)
        finally:
            EVENTS.append((started, "w_call0:" + name, message.request_id))
            mark("w_call1:" + name, message.request_id)

    stream.StreamTransport._call_with = calling


def run_role(role: str, out: str, argv: list[str]) -> int:
    """This script as the hooked server or worker: hooks, then the ``wiggle`` command."""
    hook_server() if role == "server" else hook_worker()
    signal.signal(signal.SIGUSR1, lambda *_: dump(out))
    from wiggle.cli import main

    return main(argv)


# ---------------------------------------------------------------------------- the workflow


def bump(ctx: dict[str, Any]) -> dict[str, Any]:
    ctx["n"] = ctx.get("n", 0) + 1
    return ctx


def flow() -> Any:
    from wiggle import ExecutionMode, Workflow

    builder = Workflow.define("anatomy", dict).execution(
        ExecutionMode[os.environ.get("ANATOMY_MODE", "LOCAL_SYNC")]
    )
    for i in range(int(os.environ.get("ANATOMY_STEPS", "5"))):
        builder = builder.step(bump, name=f"s{i}")
    return builder.build()


if __name__ != "__main__" and os.environ.get("ANATOMY_MODE"):
    FLOW = flow()  # what the worker serves (``wiggle worker step_anatomy:FLOW``)


# ---------------------------------------------------------------------------- analysis (pure)

PARTS = (
    ("worker -> server", "w_serialize", "s_parse"),
    ("server: parsed -> handler", "s_parse", "s_handler0"),
    ("server: handler", "s_handler0", "s_handler1"),
    ("server: handler -> reply serialized", "s_handler1", "s_serialize"),
    ("server -> worker", "s_serialize", "w_parse"),
    ("worker: parsed -> call returns", "w_parse", "w_call1"),
)


def anatomy(events: list[tuple[float, str, int]], rpc: str, warmup: float = 0.1) -> dict[str, float]:
    """Medians (ms) of each part of the ``rpc`` reports in ``events`` (both processes' marks
    merged; perf_counter is one clock across the machine's processes)."""
    events = sorted(events)
    by_rid: dict[int, dict[str, float]] = {}
    for t, what, rid in events:
        if not rid:
            continue
        what = what.split(":")[0] if what.startswith("w_call") and what.endswith(":" + rpc) else what
        by_rid.setdefault(rid, {}).setdefault(what, t)
    reports = [m for m in by_rid.values() if "w_call0" in m and "w_call1" in m]
    reports.sort(key=lambda m: m["w_call0"])
    reports = reports[int(len(reports) * warmup) :]
    out: dict[str, float] = {"reports": float(len(reports))}
    if not reports:
        return out
    out["report round trip (worker's call)"] = _median([m["w_call1"] - m["w_call0"] for m in reports])
    for label, start, end in PARTS:
        spans = [m[end] - m[start] for m in reports if start in m and end in m]
        if spans:
            out[label] = _median(spans)
    marks = [(t, what) for t, what, rid in events if not rid]
    for label, what in (
        ("  group commit (connection held)", "group"),
        ("    BEGIN + read round trip", "read_trip"),
        ("    writes + COMMIT round trip", "commit_trip"),
        ("    check + writes, one statement", "checked_trip"),
    ):
        spans = _inside(
            marks, what, [(m["s_handler0"], m["s_handler1"]) for m in reports if "s_handler1" in m]
        )
        if spans:
            out[label] = _median(spans)
            out[label.strip() + " per report"] = len(spans) / len(reports)
    return out


TIMELINE = (
    ("start call (client)", "c_start0", "c_start1"),
    ("  client -> server's start handler", "c_start0", "s_start0"),
    ("  server's start handler", "s_start0", "s_start1"),
    ("  handler -> client has the answer", "s_start1", "c_start1"),
    ("start called -> worker has the step", "c_start0", "w_task"),
    ("worker has the step -> first report sent", "w_task", "first0"),
    ("reports' round trips, summed", "reports", None),  # (sums over the reports: timeline)
    ("worker between reports, summed", "between", None),
    ("last report answered -> result at the client", "last1", "c_wait1"),
)


def timeline(events: list[tuple[float, str, int]], rpc: str, warmup: int = 10) -> dict[str, float]:
    """Medians (ms) over the instances of each stretch of an instance's life (``TIMELINE``): the
    driver's marks (c_start0 / c_start1 / c_wait1) bound an instance; inside them, the server's
    start handler, the first step reaching the worker, and the worker's ``rpc`` calls. The first
    ``warmup`` instances are left out."""
    instances: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    for t, what, _ in sorted(events):
        if what == "c_start0":
            current = {"c_start0": t, "reports": []}
        elif current is None:
            continue
        elif what == "c_wait1":
            current["c_wait1"] = t
            instances.append(current)
            current = None
        elif what == "w_call0:" + rpc:
            current["reports"].append([t, t])
        elif what == "w_call1:" + rpc and current["reports"]:
            current["reports"][-1][1] = t
        else:
            current.setdefault(what, t)  # the first of each mark inside the instance
    instances = [i for i in instances[warmup:] if i["reports"]]
    out: dict[str, float] = {"instances": float(len(instances))}
    if not instances:
        return out
    out["start called -> result (Client.wait)"] = _median([i["c_wait1"] - i["c_start0"] for i in instances])
    for i in instances:
        i["first0"] = i["reports"][0][0]
        i["last1"] = i["reports"][-1][1]
    for label, start, end in TIMELINE:
        if end is None:
            if start == "reports":
                spans = [sum(b - a for a, b in i["reports"]) for i in instances]
            else:
                spans = [sum(n[0] - p[1] for p, n in itertools.pairwise(i["reports"])) for i in instances]
        else:
            spans = [i[end] - i[start] for i in instances if start in i and end in i]
        if spans:
            out[label] = _median(spans)
    out["reports per instance"] = statistics.median(len(i["reports"]) for i in instances)
    return out


def _inside(marks: list[tuple[float, str]], what: str, windows: list[tuple[float, float]]) -> list[float]:
    """Durations of the ``what``0 -> ``what``1 spans that start inside one of ``windows``."""
    spans: list[float] = []
    opened: float | None = None
    starts = sorted(w[0] for w in windows)
    ends = {w[0]: w[1] for w in windows}
    for t, name in marks:
        if name == what + "0":
            opened = t
        elif name == what + "1" and opened is not None:
            i = bisect.bisect_right(starts, opened) - 1
            if i >= 0 and opened <= ends[starts[i]]:
                spans.append(t - opened)
            opened = None
    return spans


def _median(values: list[float]) -> float:
    return statistics.median(values) * 1000


# ---------------------------------------------------------------------------- yardsticks


async def _echo_server(port: int) -> None:
    import grpc

    async def echo(requests: Any, context: Any) -> Any:
        async for message in requests:
            yield message

    server = grpc.aio.server()
    handler = grpc.stream_stream_rpc_method_handler(echo)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("echo.Echo", {"S": handler}),))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print("listening", flush=True)  # the parent waits for this line, not a guessed time
    await server.wait_for_termination()


async def _echo_client(port: int, n: int) -> float:
    import grpc

    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.stream_stream("/echo.Echo/S")()
        spans = []
        for _ in range(n):
            t = time.perf_counter()
            await call.write(b"x" * 200)
            await call.read()
            spans.append(time.perf_counter() - t)
        call.cancel()
    return _median(spans[n // 10 :])


async def _psycopg_transaction(url: str, n: int) -> tuple[float, float]:
    """A report-shaped transaction on tables of a schema of its own (logged: the COMMIT waits
    for the WAL as a report's does); its median wall time and its client's CPU (ms)."""
    import psycopg

    schema = f"anatomy_tx_{os.getpid()}"
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(f'CREATE SCHEMA "{schema}"')
        try:
            await conn.execute(f'SET search_path TO "{schema}"')
            await conn.execute("CREATE TABLE i (id text PRIMARY KEY, v int)")
            await conn.execute("CREATE TABLE t (id text PRIMARY KEY, instance_id text, v int)")
            await conn.execute("INSERT INTO i VALUES ('a', 0)")
            await conn.execute("INSERT INTO t VALUES ('a.1', 'a', 0)")
            spans = []
            cpu = time.process_time()
            for _ in range(n):
                t = time.perf_counter()
                async with conn.pipeline() as pipeline:
                    await conn.execute("BEGIN")
                    lock = await conn.execute("SELECT * FROM i WHERE id = ANY(%s) FOR UPDATE", (["a"],))
                    read = await conn.execute("SELECT * FROM t WHERE instance_id = %s", ("a",))
                    await pipeline.sync()
                    await lock.fetchall()
                    await read.fetchall()
                    await conn.execute("UPDATE i SET v = v + 1 WHERE id = %s", ("a",))
                    await conn.execute("COMMIT")
                spans.append(time.perf_counter() - t)
            cpu = (time.process_time() - cpu) / n * 1000
        finally:
            await conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
    return _median(spans[n // 10 :]), cpu


# ---------------------------------------------------------------------------- driver


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from starts import free_port, wait_ready  # bench/starts.py (this script's folder is on the path)

    from wiggle import Client

    os.environ["ANATOMY_MODE"] = args.mode
    os.environ["ANATOMY_STEPS"] = str(args.steps)
    port = free_port()
    target = f"127.0.0.1:{port}"
    schema = f"anatomy_{os.getpid()}"
    tmp = tempfile.mkdtemp(prefix="wiggle-anatomy-")
    me = [sys.executable, str(Path(__file__).resolve())]
    server_cmd = [*me, "_server", f"{tmp}/server.json", "server", "--port", str(port)]
    if args.database_url:
        server_cmd += ["--database-url", args.database_url, "--database-schema", schema]
    logs = open(f"{tmp}/log.txt", "w")
    procs = [subprocess.Popen(server_cmd, stdout=logs, stderr=logs)]
    try:
        wait_ready(target)
        worker_cmd = [*me, "_worker", f"{tmp}/worker.json", "worker", "step_anatomy:FLOW", "--target", target]
        worker_cmd += ["--path", str(HERE)]
        procs.append(subprocess.Popen(worker_cmd, stdout=logs, stderr=logs))
        FLOW_ = flow()
        latencies = []
        with Client(target) as client:
            deadline = time.monotonic() + 60
            while not any(w.name == FLOW_.name for w in client.list_workflows()):  # the worker registers it
                if time.monotonic() > deadline:
                    raise SystemExit(f"the worker registered no workflow in 60 s; see {tmp}/log.txt")
                time.sleep(0.1)
            for i in range(args.instances + 10):
                t = time.perf_counter()
                mark("c_start0")
                instance = client.start(
                    FLOW_, {"n": 0}, request_id=f"anatomy-{i}" if args.request_ids else ""
                )
                mark("c_start1")
                info = client.wait(instance.instance_id, timeout=30)
                mark("c_wait1")
                if info.status != "COMPLETED" or info.context != {"n": args.steps}:
                    raise SystemExit(f"instance {info.instance_id} ended {info.status} with {info.context}")
                latencies.append(time.perf_counter() - t)
        for p in procs:
            p.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 10
        while not all(os.path.exists(f"{tmp}/{r}.json") for r in ("server", "worker")):
            if time.monotonic() > deadline:
                raise SystemExit(f"the hooked processes wrote no marks; see {tmp}/log.txt")
            time.sleep(0.05)
        time.sleep(0.3)  # (written whole before the next check reads them)
        events = [tuple(e) for r in ("server", "worker") for e in json.load(open(f"{tmp}/{r}.json"))]
        events += EVENTS  # the driver's own marks (this process: the start and wait calls)
    finally:
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        logs.close()
        if args.database_url:
            import psycopg

            with psycopg.connect(args.database_url, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    rpc = "CompleteTask" if args.mode == "SERVER" else "AdvanceRun"
    result: dict[str, Any] = {
        "mode": args.mode,
        "store": "postgresql" if args.database_url else "memory",
        "instance_p50_ms": _median(latencies[10:]),
        "parts_ms": anatomy(events, rpc),  # type: ignore[arg-type]
        "timeline_ms": timeline(events, rpc),  # type: ignore[arg-type]
        "request_ids": args.request_ids,
    }
    echo_port = free_port()
    echo = subprocess.Popen([*me, "_echo", str(echo_port)], stdout=subprocess.PIPE, text=True)
    try:
        assert echo.stdout is not None
        # a fixed second's wait was too short on a loaded machine (connection refused)
        if echo.stdout.readline().strip() != "listening":
            raise SystemExit(f"the echo server did not start (exit status {echo.wait(10)})")
        result["grpc_stream_echo_ms"] = asyncio.run(_echo_client(echo_port, 2000))
    finally:
        echo.terminate()
        echo.wait(10)
    if args.database_url:
        wall, cpu = asyncio.run(_psycopg_transaction(args.database_url, 2000))
        result["psycopg_transaction_ms"] = wall
        result["psycopg_transaction_client_cpu_ms"] = cpu
    return result


def report(result: dict[str, Any]) -> str:
    lines = [
        f"step anatomy: {result['mode']}, {result['store']} store, "
        f"start -> result p50 {result['instance_p50_ms']:.2f} ms",
        "",
        f"{'part (median of the reports)':45} ms",
    ]
    for label, value in result["parts_ms"].items():
        if label == "reports":
            lines.insert(1, f"reports followed: {int(value)}")
        elif label.endswith("per report"):
            lines.append(f"{'      (' + label + ')':45} {value:.2f}")
        else:
            lines.append(f"{label:45} {value:.3f}")
    timeline_ms = result.get("timeline_ms", {})
    if timeline_ms.get("instances"):
        ids = ", each start with a request id" if result.get("request_ids") else ""
        lines += ["", f"{'the instance (median of ' + str(int(timeline_ms['instances'])) + ids + ')':45} ms"]
        for label, value in timeline_ms.items():
            if label == "reports per instance":
                lines.append(f"{'  (reports per instance)':45} {value:.0f}")
            elif label != "instances":
                lines.append(f"{label:45} {value:.3f}")
    lines.append("")
    lines.append(f"{'yardstick: bare gRPC stream echo':45} {result['grpc_stream_echo_ms']:.3f}")
    if "psycopg_transaction_ms" in result:
        lines.append(
            f"{'yardstick: psycopg pipelined transaction':45} {result['psycopg_transaction_ms']:.3f}"
        )
        lines.append(f"{'  its client CPU':45} {result['psycopg_transaction_client_cpu_ms']:.3f}")
    return "\n".join(lines)


def main() -> int:
    if len(sys.argv) > 2 and sys.argv[1] in ("_server", "_worker"):
        return run_role(sys.argv[1][1:], sys.argv[2], sys.argv[3:])
    if len(sys.argv) > 2 and sys.argv[1] == "_echo":
        asyncio.run(_echo_server(int(sys.argv[2])))
        return 0
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--database-url", default="", help="PostgreSQL (a schema of its own, dropped after); none: memory"
    )
    p.add_argument("--mode", default="LOCAL_SYNC", choices=["SERVER", "LOCAL_SYNC"])
    p.add_argument("--instances", type=int, default=300)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--request-ids", action="store_true", help="every start with a request id of its own")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    result = measure(args)
    print(json.dumps(result, indent=2) if args.json else report(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
