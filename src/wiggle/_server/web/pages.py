"""The dashboard's HTML: each page rendered on the server from its JSON API data (api.py).

No inline script or style: the layout loads /static/dashboard.js and .css (assets.py), which
re-fetch the page's ``<main>`` every few seconds (no full reload) and run the actions: a dialog
asks for confirmation and for who is acting, then POSTs to the API with the page's anti-forgery
token (the ``wiggle-csrf`` meta element).

A page offers only the actions its API answer allows (``actions``: http.py turns off what the
caller's roles may not take). Wide content (tables, graphs) scrolls inside a ``div.wide`` box of
its own, so a narrow window scrolls the table, not the page.
"""

from __future__ import annotations

import json
from html import escape
from typing import Any
from urllib.parse import urlencode

import msgspec

from ..._model import WorkflowDefinition
from .actions import BULK_CANCEL_REASON, CANCEL_REASON
from .api import STATUSES
from .assets import VERSION
from .graph import render_svg
from .states import span
from .times import iso, utc_text

__all__ = [
    "layout",
    "instances_html",
    "instance_html",
    "workflows_html",
    "queues_html",
    "cluster_html",
    "duration",
]


NAV = (
    ("instances", "/instances"),
    ("workflows", "/workflows"),
    ("queues", "/queues"),
    ("schedules", "/schedules"),
    ("cluster", "/cluster"),
)


def when(ms: int) -> str:
    """A millisecond timestamp as a ``<time>`` element showing UTC text ("-" for 0); the script
    shows it in the browser's zone when the page is switched to local time."""
    if not ms:
        return "-"
    return f'<time data-ms="{int(ms)}" datetime="{iso(ms)}">{utc_text(ms)}</time>'


def duration(ms: int) -> str:
    """A length of time as a person says it: "30 s", "5 min", "1 h 30 min", "1.5 s", "250 ms"."""
    if ms < 1000:
        return f"{ms} ms"
    if ms < 60_000 and ms % 1000:
        return f"{ms / 1000:g} s"
    parts, rest = [], ms
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000), ("ms", 1)):
        n, rest = divmod(rest, size)
        if n:
            parts.append(f"{n} {unit}")
    return " ".join(parts)


def wide(html: str) -> str:
    """``html`` (a table, a graph) in a box that scrolls sideways on its own when the window is
    narrower than it (assets.py ``div.wide``): the page itself never does."""
    return f'<div class="wide">{html}</div>'


def age(ms: int) -> str:
    """A duration in ms as short text."""
    if ms < 1000:
        return f"{ms} ms"
    if ms < 120_000:
        return f"{ms / 1000:.1f} s"
    return f"{ms / 60_000:.1f} min"


def layout(title: str, page: str, body: str, who: str = "", csrf: str = "") -> str:
    """The whole document around one page's ``<main>`` content; ``who`` signed in (a sign-out
    button), ``csrf`` the anti-forgery token the page's actions send back."""
    links = "".join(
        f'<a href="{href}" class="{"on" if name == page else ""}">{name}</a>' for name, href in NAV
    )
    user = (
        '<span class="clock"><span id="updated" class="muted"></span> '
        '<button id="tz" title="show times in UTC or in this browser\'s zone">UTC</button></span>'
    )
    if who:
        user += f'<span class="who">signed in as <b id="who">{escape(who)}</b><button id="signout">sign out</button></span>'
    # The fields left empty send nothing, and the server's default applies: the placeholders
    # show what that is (the cancel buttons set the reason's: data-reason).
    dialog = (
        '<dialog id="confirm"><h3>Confirm: <span class="what"></span></h3>'
        '<label>Who are you (recorded in the history) <input id="actor" autocomplete="name"></label>'
        f'<label id="reason-row">Reason <input id="reason" placeholder="{escape(CANCEL_REASON)}"></label>'
        '<label id="name-row">Signal name <input id="signal-name" list="signal-names"></label>'
        '<label id="data-row">Data (JSON object) <textarea id="data" rows="4" placeholder="{}"></textarea></label>'
        '<label id="from-row">Retry from <select id="from-node"></select></label>'
        '<p class="count"></p>'
        '<p class="err" role="alert"></p><button id="confirm-yes">Confirm</button> '
        '<button id="confirm-signin" class="hidden">sign in again</button> '
        '<button id="confirm-back">Back</button></dialog>'
    )
    meta = f'<meta name="wiggle-csrf" content="{escape(csrf)}">' if csrf else ""
    # no favicon to fetch (it answered 404, or 401 under sign-in, on every page): an empty one,
    # a data: URL the Content-Security-Policy's img-src allows (errors.py CSP)
    return (
        f"<!doctype html><html><head><meta charset='utf-8'>"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)} · Wiggle</title>{meta}"
        '<link rel="icon" href="data:,">'
        f'<link rel="stylesheet" href="/static/dashboard.css?v={VERSION}">'
        f'<script src="/static/dashboard.js?v={VERSION}" defer></script></head>'
        f'<body><header><b>Wiggle</b>{links}{user}</header><p id="notice" class="hidden"></p>'
        '<p id="stale" class="hidden" role="status"></p>'
        f'<main id="main" data-page="{page}">{body}</main>{dialog}</body></html>'
    )


def _pill(status: str) -> str:
    return f'<span class="pill {escape(status)}">{escape(status)}</span>'


def instances_html(data: dict[str, Any]) -> str:
    """The Instances page body: filters and search, counts, bulk actions, one page of instances,
    the next-page link."""
    f = data["filters"]
    counts = " ".join(
        f'<a href="/instances?{urlencode({**_kept(f), "status": s})}" class="pill {s}" data-count="{s}">'
        f"{s.lower()} {n}</a>"
        for s, n in data["counts"].items()
    )
    now = data.get("now", 0)
    rows = "".join(
        f'<tr data-id="{escape(i["instance_id"])}"><td><a href="/instances/{escape(i["instance_id"])}">'
        f"{escape(i['instance_id'])}</a>{_child_of(i)}</td><td>{escape(i['workflow'])}</td>"
        f"<td>{_pill(i['status'])}</td><td>{escape(', '.join(i['at']))}</td><td>{escape(i['correlation_id'])}</td>"
        f'<td>{when(i["created_at"])}</td><td class="err">{_why(i, now)}</td></tr>'
        for i in data["instances"]
    )
    more = ""
    if data["next_page_token"]:
        more = (
            f'<a id="next-page" href="/instances?{urlencode({**_kept(f), "page_token": data["next_page_token"]})}">'
            "next page →</a>"
        )
    bulk = _bulk_html(f, data.get("actions", {"bulk_cancel": True, "bulk_retry": True}))
    table = (
        "<table><thead><tr><th>instance</th><th>workflow</th><th>status</th><th>at</th>"
        "<th>correlation id</th><th>created</th><th>reason, error</th></tr></thead>"
        f"<tbody>{rows}</tbody></table>"
    )
    return f'<h2>Instances</h2>{_filters_html(f)}<p class="counts">{counts}</p>{bulk}{wide(table)}{more}'


def _why(row: dict[str, Any], now: int) -> str:
    """The list's "reason, error" cell: the instance's reason or error, else, while a step fails
    and goes again, "retrying <node>: attempt 3 in 4 s — last error: ..." (a RUNNING instance
    failing attempt after attempt has no error of its own: api.py ``retrying``)."""
    if row["reason"] or row["error"]:
        return escape(row["reason"] or row["error"])
    lines = []
    for r in row.get("retrying", ()):
        if r["status"] == "RUNNING":
            what = f"attempt {r['attempt']} running"
        elif r["next_attempt_at"] > now:
            what = f"attempt {r['attempt']} in {span(r['next_attempt_at'] - now)}"
        else:
            what = f"attempt {r['attempt']} waiting for a worker"
        error = (
            r["last_error"] if len(r["last_error"]) <= 200 else r["last_error"][:199] + "…"
        )  # whole in the API
        last = f" — last error: {error}" if error else ""
        lines.append(f'<span class="retrying">retrying {escape(r["node_id"])}: {escape(what + last)}</span>')
    return "<br>".join(lines)


def _child_of(row: dict[str, Any]) -> str:
    if not row["parent_id"]:
        return ""
    pid = escape(row["parent_id"])
    return f' <span class="muted child-of">child of <a href="/instances/{pid}">{pid}</a></span>'


def _filters_html(f: dict[str, Any]) -> str:
    """The filter and search form (a GET: the filters are the page's address)."""
    options = "".join(
        f'<option value="{s}"{" selected" if s == f["status"] else ""}>{s.lower() or "any status"}</option>'
        for s in ("", *STATUSES)
    )

    def box(name: str, hint: str, cls: str = "") -> str:
        c = f' class="{cls}"' if cls else ""
        return f'<input name="{name}"{c} placeholder="{escape(hint)}" title="{escape(hint)}" value="{escape(str(f[name]))}">'

    children = " checked" if f["children"] else ""
    return (
        '<form class="filters" method="get" action="/instances"><div>'
        f'{box("workflow", "workflow")}<select name="status">{options}</select>'
        f"{box('correlation_id', 'correlation id')}{box('parent_id', 'parent instance')}"
        f"{box('created_after', 'created after: 2026-12-02 14:30, 2h (ago) or ms', 'time')}"
        f"{box('created_before', 'created before: 2026-12-02 14:30, 2h (ago) or ms', 'time')}</div><div>"
        f"{box('node', 'at node (where it is now)')}{box('text', 'reason or error contains')}"
        f"{box('ctx', 'ctx.customer_id = c-42', 'ctx')}"
        f'<label><input type="checkbox" name="children" value="1"{children}> sub-workflow children too</label> '
        '<button type="submit">search</button></div></form>'
    )


def _bulk_html(f: dict[str, Any], allowed: dict[str, Any]) -> str:
    """The bulk buttons the caller may use (``allowed``: the API's ``actions``): cancel or retry
    what the filter matches (counted in the dialog first); nothing when neither."""
    qs = escape(urlencode(_kept(f)))
    buttons = []
    if allowed.get("bulk_cancel"):
        buttons.append(
            f'<button class="bulk" id="bulk-cancel" data-kind="bulk-cancel" data-url="/api/bulk/cancel?{qs}" '
            f'data-reason="{escape(BULK_CANCEL_REASON)}" '
            'data-what="cancel every live instance this filter matches">cancel all matching…</button>'
        )
    if allowed.get("bulk_retry"):
        buttons.append(
            f'<button class="bulk" id="bulk-retry" data-kind="bulk-retry" data-url="/api/bulk/retry?{qs}" '
            'data-what="retry every failed instance this filter matches">retry all matching…</button>'
        )
    return f'<p class="bulk">{" ".join(buttons)}</p>' if buttons else ""


def _kept(filters: dict[str, Any]) -> dict[str, Any]:
    """The filters to carry into a link: those set, without paging (the children toggle as 1)."""
    return {k: (1 if v is True else v) for k, v in filters.items() if v and k != "page_token"}


def instance_html(data: dict[str, Any]) -> str:
    """The Instance page body: status, actions, graph with node states, context, tokens (with
    what each waits for, until when), history."""
    inst = data["instance"]
    iid = escape(inst["instance_id"])
    definition = msgspec.convert(data["definition"], WorkflowDefinition)
    actions = _actions_html(data, iid)
    related = _related_html(inst, data)
    tokens = _tokens_html(data["tokens"], data["now"])
    # a sub-workflow's node links its child, in the graph as in the tokens table
    children = {
        t["node_id"]: f"/instances/{t['child_id']}"
        for t in data["tokens"]
        if t["status"] == "AWAITING" and t.get("child_id")
    }
    history = _history_html(data["history"])
    reason = f' <span class="muted">{escape(inst["reason"])}</span>' if inst["reason"] else ""
    error = f'<p class="err">{escape(inst["error"])}</p>' if inst["error"] else ""
    if inst.get("waiting_reason"):  # a workflow concurrency limit's wait (docs/flow-control.md)
        error += f'<p id="waiting-reason" class="muted">{escape(inst["waiting_reason"])}</p>'
    failed = f", {inst['failed_attempts']} failed" if inst["failed_attempts"] else ""
    deadline = f" · times out at {when(inst['deadline_at'])}" if inst["deadline_at"] else ""
    return (
        f'<h2>Instance <code id="instance-id">{iid}</code></h2>'
        f'<p>{_pill(inst["status"])}{reason} workflow <a href="/workflows#{escape(inst["workflow"])}">'
        f'{escape(inst["workflow"])}</a> <span class="muted">version {escape(inst["version"])}</span>'
        f" · correlation {escape(inst['correlation_id'] or '-')} · created {when(inst['created_at'])}"
        f" · finished {when(inst['finished_at'])}{deadline} · "
        f'<span id="attempts">{inst["step_attempts"]} step attempts{failed}</span></p>{related}{error}'
        f'<p class="actions">{" ".join(actions)}</p>'
        f"{wide(render_svg(definition, data['node_states'], data['node_labels'], children))}"
        # the characters themselves (ensure_ascii=False), not \u escapes; escaped for HTML as before
        f'<h3>Context</h3><pre id="context">{escape(json.dumps(inst["context"], indent=2, sort_keys=True, ensure_ascii=False))}</pre>'
        '<h3>Tokens</h3><div class="wide"><table id="tokens"><thead><tr><th>token</th><th>node</th><th>status</th>'
        "<th>attempt</th><th>waits until</th><th>queue</th><th>lease owner</th><th>local run</th><th>last error</th>"
        f"</tr></thead><tbody>{tokens}</tbody></table></div>"
        '<h3>History</h3><div class="wide"><table id="history"><thead><tr><th>ended</th><th>node</th><th>kind</th>'
        "<th>attempt</th><th>outcome</th><th>took</th><th>worker / who</th><th>error, traceback</th></tr></thead>"
        f"<tbody>{''.join(history)}</tbody></table></div>"
    )


def _actions_html(data: dict[str, Any], iid: str) -> list[str]:
    """The buttons of the actions the instance allows now."""
    acts = data["actions"]
    actions = []
    if acts["cancel"]:
        actions.append(
            f'<button id="cancel" data-kind="cancel" data-what="cancel {iid}" '
            f'data-reason="{escape(CANCEL_REASON)}" data-url="/api/instances/{iid}/cancel">cancel…</button>'
        )
    for name in acts["complete_user_task"]:
        n = escape(name)
        actions.append(
            f'<button class="complete-task" data-task="{n}" data-kind="task" data-what="complete user task {n}" '
            f'data-url="/api/instances/{iid}/user-tasks/{n}">complete {n}…</button>'
        )
    for wait in data["awaiting_signals"] if acts["signal"] else ():
        n = escape(wait["signal"])
        actions.append(
            f'<button class="send-signal" data-signal="{n}" data-node="{escape(wait["node_id"])}" data-kind="signal" '
            f'data-what="send signal {n} to {iid}" data-url="/api/instances/{iid}/signals/">send signal {n}…</button>'
        )
    if acts["retry"]:
        choices = acts["retry_from"]
        at = ", ".join(choices["failed_at"])
        actions.append(
            f'<button id="retry" data-kind="retry" data-what="retry {iid}" '
            f'data-failed-at="{escape(at)}" data-nodes="{escape(",".join(choices["nodes"]))}" '
            f'data-url="/api/instances/{iid}/retry">retry…</button>'
        )
    if acts["signal"]:
        names = "".join(f'<option value="{escape(n)}">' for n in acts["signal_names"])
        actions.append(
            f'<button id="signal" data-kind="signal" data-what="send a signal to {iid}" '
            f'data-url="/api/instances/{iid}/signals/">send a signal…</button>'
            f'<datalist id="signal-names">{names}</datalist>'
        )
    return actions


def _related_html(inst: dict[str, Any], data: dict[str, Any]) -> str:
    """Links to the parent, the children and the schedule that started it."""
    links = []
    if inst["parent_id"]:
        pid = escape(inst["parent_id"])
        links.append(f'parent <a id="parent" href="/instances/{pid}">{pid}</a>')
    if data["children"]:
        kids = ", ".join(
            f'<a class="child" href="/instances/{escape(c["instance_id"])}">{escape(c["instance_id"])}</a>'
            f' <span class="muted">({escape(c["node_id"])})</span>'
            for c in data["children"]
        )
        links.append(f"children {kids}")
    if inst["schedule_id"]:
        sid = escape(inst["schedule_id"])
        links.append(f'started by schedule <a href="/schedules#{sid}">{sid}</a>')
    return f'<p class="related">{" · ".join(links)}</p>' if links else ""


def _tokens_html(tokens: list[dict[str, Any]], now: int) -> str:
    """The rows of the tokens table; each says what its wait ends with and when."""
    rows = "".join(
        f'<tr data-token="{escape(t["token_id"])}"><td>{escape(t["token_id"])}</td><td>{escape(t["node_id"])}</td>'
        f'<td>{escape(t["status"])}</td><td class="num">{t["attempt"]}</td><td class="times">{_times(t, now)}</td>'
        f"<td>{escape(t['queue'])}</td><td>{escape(t['lease_owner'])}</td><td>{escape(t['local_run_owner'])}"
        f"{' (' + str(t['local_run_steps']) + ' steps)' if t['local_run_owner'] else ''}</td>"
        f'<td class="err">{escape(t["last_error"])}</td></tr>'
        for t in tokens
    )
    return rows


def _times(token: dict[str, Any], now: int) -> str:
    """ "wakes at <time> (in 4 min)", one line per moment the token waits for; a sub-workflow's
    token waits for its child (linked), not for a time (states.py ``token_times``); a branch
    at a join for the others."""
    lines = []
    if token["status"] == "AWAITING" and token.get("child_id"):
        child = escape(token["child_id"])
        lines.append(f'waits for child <a class="child" href="/instances/{child}">{child}</a>')
    elif token["status"] == "JOINED":
        lines.append("the other branches")
    lines += [
        f'{escape(m["what"])} {when(m["at"])} <span class="muted">(in {span(m["at"] - now)})</span>'
        if m["at"] > now
        else f'{escape(m["what"])} {when(m["at"])} <span class="muted">(due)</span>'
        for m in token["times"]
    ]
    return "<br>".join(lines) or "-"


def _history_html(entries: list[dict[str, Any]]) -> list[str]:
    """The rows of the history table."""
    history = []
    for e in entries:
        who = escape(e["worker_id"])
        tb = f'<pre class="tb">{escape(e["traceback"])}</pre>' if e.get("traceback") else ""
        history.append(
            f'<tr class="h-{escape(e["outcome"])}"><td>{when(e["ended_at"])}</td><td>{escape(e["node_id"])}</td>'
            f'<td>{escape(e["kind"])}</td><td class="num">{e["attempt"] or ""}</td><td>{escape(e["outcome"])}</td>'
            f'<td class="num">{age(e["duration_ms"])}</td><td>{who}</td>'
            f'<td><span class="err">{escape(e["error"])}</span>{tb}</td></tr>'
        )
    return history


def workflows_html(data: dict[str, Any]) -> str:
    """The Workflows page body: per version its mode, node count, graph; counts per status."""
    parts = ["<h2>Workflows</h2>"]
    counts = data["counts"]
    for w in data["workflows"]:
        definition = msgspec.convert(w["definition"], WorkflowDefinition)
        per = counts.get(w["name"], {})
        pills = " ".join(
            f'<a class="pill {s}" href="/instances?{urlencode({"workflow": w["name"], "status": s})}">'
            f"{s.lower()} {n}</a>"
            for s, n in per.items()
        )
        parts.append(
            f'<section class="workflow" id="{escape(w["name"])}" data-version="{escape(w["version"])}">'
            f'<h3>{escape(w["name"])} <span class="muted">version {escape(w["version"])}</span></h3>'
            f"<p>mode {escape(w['execution_mode'])} · {w['nodes']} nodes · registered {when(w['registered_at'])}</p>"
            f"<p>{pills}</p><details open><summary>graph</summary>{wide(render_svg(definition))}</details></section>"
        )
    return "".join(parts)


def _passes_over(holds: list[dict[str, Any]]) -> str:
    """A worker's nodes it has no handler for, which its claims pass over for a while."""
    return "".join(
        f'<br><span class="err passes-over">no handler: passes over {escape(h["node"])} of'
        f" {escape(h['workflow'])} version {escape(h['version'])}"
        f' <span class="muted">(offered again in {age(int(h["for_seconds"] * 1000))})</span></span>'
        for h in holds
    )


def queues_html(data: dict[str, Any]) -> str:
    """The Queues page body: one row per queue (its depth, what runs, its limits and the steps
    held by a key's slot or waiting for one), then the workers polling each."""
    rows = []
    now = data["now"]
    for q in data["queues"]:
        lag = q["lag"] or {}
        warn = " err lagging" if lag.get("lagging") else ""
        workers = "<br>".join(
            f'{escape(w["worker_id"])} <span class="muted">seen {age(now - w["last_seen"])} ago,'
            f" {w['in_flight']} in flight</span>{_passes_over(w['passes_over'])}"
            for w in q["workers"]
        )
        rate = f"{lag['rate_per_second']:.1f}/s" if lag.get("rate_per_second") is not None else "-"
        wait = q["schedule_to_start"]
        waited = "-"
        if wait:
            p95 = wait["p95_seconds_at_most"]
            bound = age(int(p95 * 1000)) if p95 is not None else "5 min+"
            waited = f"{age(int(wait['mean_seconds'] * 1000))} mean, p95 ≤ {bound}"

        rows.append(
            f'<tr data-queue="{escape(q["queue"])}"><td>{escape(q["queue"])}</td><td class="num">{q["ready"]}</td>'
            f'<td class="num">{q["delayed"]}</td><td class="num oldest{warn}">{age(q["oldest_ready_age_ms"])}</td>'
            f'<td class="num">{q["running"]}</td><td class="num">{q["in_local_run"]}</td>'
            f'<td class="limits">{_queue_limits(q, now)}</td><td class="slots">{_key_slots(q)}</td>'
            f'<td class="num">{rate}</td><td class="num wait">{waited}</td><td>{workers or "-"}</td></tr>'
        )
    return "<h2>Queues</h2>" + wide(
        "<table><thead><tr><th>queue</th><th>ready</th><th>delayed</th><th>oldest ready</th>"
        "<th>running</th><th>in local runs</th><th>limits</th>"
        f'<th title="{_SLOTS_TITLE}">key slots</th><th>throughput</th>'
        "<th>schedule to start</th><th>workers polling</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


_SLOTS_TITLE = "running steps holding a slot of their concurrency limit's key (held), ready steps waiting for one (waiting)"


def _queue_limits(q: dict[str, Any], now: int) -> str:
    """A queue's own limits (docs/flow-control.md#queue-limits), one per line: "max running 20
    (3 in use)", "rate 50 / 1 s", and while its rate holds its steps back "rate limited until
    <time> (in 2 s)"; while steps wait for their key's rate (#per-key-rate-limits) "3 waiting for
    their key's rate, the next at <time> (in 2 s)"; "—" when there is none of these."""
    lines = []
    if q["max_running"]:
        lines.append(f'max running {q["max_running"]} <span class="muted">({q["running"]} in use)</span>')
    if q["rate_max"]:
        lines.append(f"rate {q['rate_max']} / {_period(q['rate_period_millis'])}")
    until = q["rate_limited_until"]
    if until:
        lines.append(
            f'<span class="err rate-limited">rate limited until {when(until)}</span> '
            f'<span class="muted">(in {span(until - now)})</span>'
        )
    if q["rate_waiting"]:
        at = q["rate_waiting_until"]
        lines.append(
            f'<span class="key-rate">{q["rate_waiting"]} waiting for their key\'s rate, the next at {when(at)}</span> '
            f'<span class="muted">(in {span(max(at - now, 0))})</span>'
        )
    return "<br>".join(lines) or "—"


def _key_slots(q: dict[str, Any]) -> str:
    """The steps' concurrency limits on the queue (docs/flow-control.md#concurrency-limits): of
    its running steps, those holding a key's slot ("held"); of its ready ones, those waiting for
    one ("waiting"); "-" when none does either."""
    if not (q["limit_held"] or q["limit_waiting"]):
        return "-"
    return f"{q['limit_held']} held<br>{q['limit_waiting']} waiting"


def _period(ms: int) -> str:
    """A rate's period as short text: "1 s", "15 min", "1 h", "250 ms"."""
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000)):
        if ms and ms % size == 0:
            return f"{ms // size} {unit}"
    return f"{ms} ms"


def _this_node(node: dict[str, Any]) -> str:
    """After the answering node's id: "(this node, gRPC host:port)"; nothing after the others'."""
    if not node["this_node"]:
        return ""
    grpc = node.get("grpc_address", "")
    return f" (this node, gRPC {escape(grpc)})" if grpc else " (this node)"


def cluster_html(data: dict[str, Any]) -> str:
    """The Cluster page body: nodes, the clock leader, readiness."""
    ready = data["readiness"]
    rows = "".join(
        f"<tr><td>{escape(n['node_id'])}{_this_node(n)}</td>"
        f"<td>{'leader' if n['clock_leader'] else ''}</td><td>{escape(n['address'])}</td>"
        f"<td>{when(n['connected_since'])}</td><td>{age(max(data['now'] - n['last_seen'], 0))} ago</td></tr>"
        for n in data["nodes"]
    )
    return (
        f"<h2>Cluster</h2><p>this node: {'ready' if ready['ready'] else 'NOT READY'} — {escape(ready['detail'])}</p>"
        + wide(
            "<table><thead><tr><th>node</th><th>clock</th><th>database client address</th><th>connected since</th>"
            f"<th>last activity</th></tr></thead><tbody>{rows}</tbody></table>"
        )
    )
