"""Every SQL statement of the PostgreSQL store, rendered once per schema."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from psycopg import sql

from ..._engine.state import ACTIVE_TOKEN_STATUSES
from ..base import CONTEXT_FIELD_PATTERN, InstanceQuery
from .claim_terms import (
    DB_NOW_MILLIS,
    KEY_RUNNING,
    RANK,
    RATE_NOW,
    RATE_OPEN,
    UNDER_LIMIT,
    key_held,
    rate_open,
)
from .codecs import (
    HISTORY_COLS,
    HISTORY_WRITE_FIELDS,
    INSTANCE_COLS,
    INSTANCE_FIELDS,
    INSTANCE_UPDATED,
    N_INSTANCE,
    N_TOKEN,
    SQL_TYPES,
    TOKEN_COLS,
    TOKEN_FIELDS,
    TOKEN_UPDATED,
    array_literals,
)

__all__ = [
    "ID_CLOCK_SLACK_MILLIS",
    "Queries",
    "RowWrite",
    "SetWrite",
    "list_conditions",
    "like_pattern",
]

ID_CLOCK_SLACK_MILLIS = 60_000  # an instance's id time and its created_at are at most this far apart


def like_pattern(text: str) -> str:
    """``%text%`` for ILIKE with its wildcards (and the escape character) taken literally."""
    return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def list_conditions(query: InstanceQuery, schema: str) -> tuple[list[str], list[Any]]:
    """The WHERE conditions (joined by AND) and parameters of a ListInstances query; the same
    filters as wiggle/_storage/base.py instance_matches. A context field is written into the text
    as a literal (CONTEXT_FIELD_PATTERN checked it), so the expression index of that field
    (context_indexes.py) matches the condition."""
    s = sql.Identifier(schema).as_string()
    conds: list[str] = []
    params: list[Any] = []
    for cond, value in (
        ("id < %s", query.page_token),
        ("workflow = %s", query.workflow),
        ("status = %s", query.status),
        # the redundant "<> ''" lets even a generic plan use the partial index
        ("correlation_id = %s AND correlation_id <> ''", query.correlation_id),
        ("parent_id = %s", query.parent_id),
        ("created_at >= %s", query.created_after),
        ("created_at < %s", query.created_before),
        (f"id IN (SELECT instance_id FROM {s}.tokens WHERE node_id = %s AND status IN {ACTIVE})", query.node),
    ):
        if value:
            conds.append(cond)
            params.append(value)
    if query.top_level:
        conds.append("parent_id = ''")
    if query.text:
        conds.append("(reason ILIKE %s OR error ILIKE %s)")
        params += [like_pattern(query.text)] * 2
    for field, value in query.context:
        if not CONTEXT_FIELD_PATTERN.fullmatch(field):  # checked at the edge: never into SQL unchecked
            raise ValueError(f"context field {field!r} is not a plain identifier")
        conds.append(f"{s}.context_text(context, {sql.Literal(field).as_string()}) = %s")
        params.append(value)
    # Instance ids start with a millisecond of their creation (new_instance_id): id bounds let the
    # primary key skip finished rows outside the time range. That millisecond is not always
    # created_at's: it never goes back, so after a start with a later "now" (or a clock that
    # stepped back) an id runs ahead of its created_at. Both bounds leave that slack; the
    # created_at conditions above are the exact ones (a created_before bound without it missed
    # an instance whose id ran one millisecond ahead: fresh-clone CI of d32327d).
    if query.created_after:
        conds.append("id >= %s")
        params.append(f"wi-{max(query.created_after - ID_CLOCK_SLACK_MILLIS, 0):012x}")
    if query.created_before:
        conds.append("id < %s")
        params.append(f"wi-{query.created_before + ID_CLOCK_SLACK_MILLIS:012x}")
    return conds, params


ACTIVE = "(" + ", ".join(f"'{s.value}'" for s in sorted(ACTIVE_TOKEN_STATUSES)) + ")"


def unnest(fields: list[str] | tuple[str, ...], ordinality: bool = False) -> str:
    """``unnest(%s::type[], ...) AS v(field, ...)``: rows passed as one array per column."""
    arrays = ", ".join(f"%s::{SQL_TYPES[f]}[]" for f in fields)
    if ordinality:
        return f"unnest({arrays}) WITH ORDINALITY AS v({', '.join(fields)}, ord)"
    return f"unnest({arrays}) AS v({', '.join(fields)})"


def prefixed(cols: str, alias: str) -> str:
    return ", ".join(f"{alias}.{c.strip()}" for c in cols.split(","))


#: What a list without contexts (InstanceQuery.with_context) selects in place of the columns of
#: user data: constants codecs.py reads back as empty (``{}``, or NULL: none), named as the
#: columns so that ``i.*`` keeps the instance columns' order.
UNREAD_INSTANCE = {
    "context": "'{}'::bytea AS context",
    "joins": "'{}'::bytea AS joins",
    "retry_point": "NULL::bytea AS retry_point",
}
UNREAD_TOKEN = {"context": "NULL::bytea AS context"}  # a fork branch's own context


def unread_columns(fields: tuple[str, ...], unread: dict[str, str], alias: str = "") -> str:
    """``fields`` as a select list (each prefixed by ``alias.``), those in ``unread`` replaced by
    their constant."""
    prefix = f"{alias}." if alias else ""
    return ", ".join(unread.get(f, prefix + f) for f in fields)


class SetWrite:
    """A write of many rows in one statement (unnest of one array per column), and its parameters.

    ``ids_again``: the statement takes the last column's array (the ids) once more, as its last
    parameter (``set_from``'s ``t.id = ANY(...)``)."""

    __slots__ = ("statement", "params")

    def __init__(self, statement: str, fields: list[str] | tuple[str, ...], ids_again: bool = False) -> None:
        self.statement = statement
        columns = array_literals(fields)
        self.params: Callable[[list[Any]], list[str]]
        if ids_again:

            def params(rows: list[Any]) -> list[str]:
                arrays = columns(rows)
                arrays.append(arrays[-1])
                return arrays

            self.params = params
        else:
            self.params = columns


class RowWrite:
    """One kind of row write, as a part of a transaction's one write statement (writes.py).

    ``rows(n)`` is the part for ``n`` rows written row by row: for an insert, its one-row
    statement with ``n`` rows of VALUES; for an update, ``n`` copies of its one-row statement
    (``UPDATE ... WHERE id = %s``), each its own part, so that every one of them reaches its row
    through the primary key whatever the plan's statistics (a join to a VALUES list made on a
    new schema's empty tables would scan the table, and a prepared statement keeps its plan:
    docs/postgres-plans.md). ``many`` is the set-based write (unnest of one array per column)
    used from ``ChangeWriter.set_write_min_rows`` rows on. Parameters go in row order, each row in
    the one-row statement's order."""

    __slots__ = ("name", "one", "many", "insert", "_values")

    def __init__(self, name: str, one: str, many: SetWrite, insert: bool = False) -> None:
        self.name = name
        self.one = one
        self.many = many
        self.insert = insert
        self._values = one[one.rindex("VALUES (") + len("VALUES ") :] if insert else ""

    def rows(self, n: int) -> list[str]:
        """The statement parts writing ``n`` rows one by one."""
        if not self.insert:
            return [self.one] * n
        if not n:
            return []
        return [self.one + ", " * (n > 1) + ", ".join([self._values] * (n - 1))]


class Queries:
    """Every statement, rendered once with the schema quoted."""

    def __init__(self, schema: str) -> None:
        s = sql.Identifier(schema).as_string()

        def q(text: str) -> str:
            return text.replace("{s}", s)

        self._rows(q)
        self._set_writes(q)
        self._reads(q)
        self._claims(q)
        self._limits(q)
        self._clock_duties(q)
        self._definitions(q)

    def _rows(self, q: Callable[[str], str]) -> None:
        """Rows of one instance: lock, read, insert, update (one row each)."""
        # After the columns: each row's xmin and this transaction's id (the lock gave it one),
        # which the group commit's copies of what it wrote are checked by (state_cache.py).
        self.lock_instances = q(
            f"SELECT {INSTANCE_COLS}, xmin::text, pg_current_xact_id()::xid::text FROM {{s}}.instances "
            "WHERE id = ANY(%s::text[]) ORDER BY id FOR UPDATE"
        )
        self.active_tokens_many = q(
            f"SELECT {TOKEN_COLS}, xmin::text FROM {{s}}.tokens WHERE instance_id = ANY(%s::text[]) AND status IN {ACTIVE}"
        )
        # The same for one instance (a group of one: every report of a quiet server). PostgreSQL
        # plans ``= ANY($1)`` for an array of unknown length, costs that plan above a plan made for
        # the one id, and so plans the prepared statement again at every execution (its
        # pg_prepared_statements row: custom plans only); ``= $1`` keeps one generic plan.
        self.active_tokens_one = q(
            f"SELECT {TOKEN_COLS}, xmin::text FROM {{s}}.tokens WHERE instance_id = %s AND status IN {ACTIVE}"
        )
        # The check of a group whose instances this server wrote last (migration 0021).
        self.expect_unchanged = q("SELECT {s}.expect_unchanged(%s::text[], %s::text[])")
        # An instance (or a page of them) with its active tokens, in one statement: one snapshot.
        with_tokens = (
            f"SELECT i.*, {prefixed(TOKEN_COLS, 't')} FROM (SELECT {INSTANCE_COLS} FROM {{s}}.instances "
            "WHERE {where}) i "
            f"LEFT JOIN {{s}}.tokens t ON t.instance_id = i.id AND t.status IN {ACTIVE} ORDER BY i.id DESC"
        )
        self.view = q(with_tokens.replace("{where}", "id = %s"))
        self.list_instances = q(with_tokens.replace("{where}", "{where} ORDER BY id DESC LIMIT %s"))
        # The same page without the user data a list leaves out (InstanceQuery.with_context):
        # constants in place of those columns, so PostgreSQL neither reads nor sends their TOAST
        # (a filter on a context field is still evaluated, inside the subquery).
        bare = (
            f"SELECT i.*, {unread_columns(TOKEN_FIELDS, UNREAD_TOKEN, 't')} FROM (SELECT "
            f"{unread_columns(INSTANCE_FIELDS, UNREAD_INSTANCE)} "
            "FROM {s}.instances WHERE {where} ORDER BY id DESC LIMIT %s) i "
            f"LEFT JOIN {{s}}.tokens t ON t.instance_id = i.id AND t.status IN {ACTIVE} ORDER BY i.id DESC"
        )
        self.list_instances_bare = q(bare)
        self.insert_instance = q(
            f"INSERT INTO {{s}}.instances ({INSTANCE_COLS}) VALUES ({', '.join(['%s'] * N_INSTANCE)})"
        )
        instance_set = ", ".join(f"{INSTANCE_FIELDS[i]} = %s" for i in INSTANCE_UPDATED)
        self.update_instance = q(f"UPDATE {{s}}.instances SET {instance_set}, context = %s WHERE id = %s")
        self.update_instance_keep_context = q(f"UPDATE {{s}}.instances SET {instance_set} WHERE id = %s")
        self.insert_token = q(
            f"INSERT INTO {{s}}.tokens ({TOKEN_COLS}) VALUES ({', '.join(['%s'] * N_TOKEN)})"
        )
        token_set = ", ".join(f"{TOKEN_FIELDS[i]} = %s" for i in TOKEN_UPDATED)
        self.update_token = q(f"UPDATE {{s}}.tokens SET {token_set} WHERE id = %s")
        n_history = len(HISTORY_WRITE_FIELDS)
        self.insert_history = q(
            f"INSERT INTO {{s}}.history ({', '.join(HISTORY_WRITE_FIELDS)}) VALUES ({', '.join(['%s'] * n_history)})"
        )

    def _set_writes(self, q: Callable[[str], str]) -> None:
        """The same writes for many rows at once (set-based)."""

        # The same writes for several rows at once: one statement, one array per column (a
        # statement per row, even pipelined, costs the server a bind/execute/plan per row).
        # Parameters and arrays are in the order of the single-row statements above.
        # ``t.id = ANY(ids)`` repeats the join's condition as one on the table alone: with it the
        # plan reaches the rows through the primary key from a few hundred rows on; with only the
        # join, PostgreSQL's costs keep a hash join over the whole table up to about 2,000
        # (instances) and 3,000 (tokens) rows (docs/postgres-plans.md, "Statistics on a new schema").
        def set_from(table: str, fields: list[str]) -> SetWrite:
            assert fields[-1] == "id"
            assignments = ", ".join(f"{f} = v.{f}" for f in fields if f != "id")
            text = (
                f"UPDATE {{s}}.{table} AS t SET {assignments} FROM {unnest(fields)} "
                'WHERE t.id = ANY(%s::text[]) AND t.id = v.id COLLATE "C"'
            )
            return SetWrite(q(text), fields, ids_again=True)

        def insert_from(table: str, fields: tuple[str, ...]) -> SetWrite:
            cols = ", ".join(fields)
            # WITH ORDINALITY ... ORDER BY: rows go in (and take their identity values) in order
            text = (
                f"INSERT INTO {{s}}.{table} ({cols}) SELECT {cols} FROM {unnest(fields, True)} ORDER BY ord"
            )
            return SetWrite(q(text), fields)

        instance_updated = [INSTANCE_FIELDS[i] for i in INSTANCE_UPDATED]
        self.update_instances = set_from("instances", [*instance_updated, "context", "id"])
        self.update_instances_keep_context = set_from("instances", [*instance_updated, "id"])
        self.update_tokens = set_from("tokens", [*(TOKEN_FIELDS[i] for i in TOKEN_UPDATED), "id"])
        self.insert_instances = insert_from("instances", INSTANCE_FIELDS)
        self.insert_tokens = insert_from("tokens", TOKEN_FIELDS)
        self.insert_histories = insert_from("history", HISTORY_WRITE_FIELDS)
        # A transaction's writes of every kind, in one statement (writes.py): one RowWrite per
        # kind of row, in the order the parts go into the statement (and take their parameters).
        self.row_writes = (
            RowWrite("new instances", self.insert_instance, self.insert_instances, insert=True),
            RowWrite("instances", self.update_instance_keep_context, self.update_instances_keep_context),
            RowWrite("instances with context", self.update_instance, self.update_instances),
            RowWrite("tokens", self.update_token, self.update_tokens),
            RowWrite("new tokens", self.insert_token, self.insert_tokens, insert=True),
            RowWrite("history", self.insert_history, self.insert_histories, insert=True),
        )

    def _reads(self, q: Callable[[str], str]) -> None:
        """History, existence, notifications, peers."""
        # an entry's columns and the entries packed with it (migration 0023, codecs.history_from)
        self.history = q(
            f"SELECT {HISTORY_COLS}, more FROM {{s}}.history WHERE instance_id = %s ORDER BY seq"
        )
        self.instance_exists = q("SELECT 1 FROM {s}.instances WHERE id = %s")
        self.notify = q("SELECT pg_notify(c, p) FROM unnest(%s::text[], %s::text[]) AS n(c, p)")
        # A node's rows of wanted wake-ups (migration 0022, wakeups.py), each new one told to the
        # other nodes in the same transaction ("<node>:want:<kind>:<subject>" on the peers channel).
        self.want_wakeups = q(
            "WITH added AS (INSERT INTO {s}.wakeups (node, kind, subject) SELECT %s, k, s "
            "FROM unnest(%s::text[], %s::text[]) AS v(k, s) ON CONFLICT DO NOTHING RETURNING node, kind, subject) "
            "SELECT pg_notify(%s, node || ':want:' || kind || ':' || subject) FROM added WHERE kind <> 'node'"
        )
        self.unwant_wakeups = q(
            "DELETE FROM {s}.wakeups w USING unnest(%s::text[], %s::text[]) AS v(k, s) "
            "WHERE w.node = %s AND w.kind = v.k AND w.subject = v.s"
        )
        self.drop_node_wakeups = q("DELETE FROM {s}.wakeups WHERE node = %s")
        # The node ids of this schema's live nodes: those of the connections named with its
        # application_name prefix (cluster.py app_prefix), the prefix a LIKE pattern.
        live = (
            "SELECT DISTINCT split_part(application_name, ':', 3) AS node FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name LIKE {prefix}"
        )
        # Other nodes on this schema, ours excluded; how many of them do not filter their NOTIFYs
        # (no 'node' row in wakeups: an older version); whether wakeups holds rows of nodes no
        # longer connected; and the wake-ups the others want ("<kind>:<subject>"). (A Wiggle from
        # before these names is not seen: during a rolling upgrade from one, its pollers get no
        # wake-ups from upgraded nodes and find that work when their long poll ends instead.)
        self.count_peers = q(
            f"WITH live AS ({live.format(prefix='%(prefix)s')}) "
            "SELECT (SELECT count(*) FROM live WHERE node <> %(node)s), "
            "(SELECT count(*) FROM live l WHERE l.node <> %(node)s AND NOT EXISTS "
            "(SELECT 1 FROM {s}.wakeups w WHERE w.kind = 'node' AND w.subject = '' AND w.node = l.node)), "
            "EXISTS (SELECT 1 FROM {s}.wakeups w WHERE w.node NOT IN (SELECT node FROM live)), "
            "ARRAY(SELECT DISTINCT w.kind || ':' || w.subject FROM {s}.wakeups w WHERE w.kind <> 'node' "
            "AND w.node <> %(node)s AND w.node IN (SELECT node FROM live))"
        )
        # cluster.py end_stalled: another node's sessions in a transaction that have been
        # waiting for their client (ClientRead, mid-pipeline or idle) for the stall timeout
        self.end_stalled = (
            "SELECT pid, application_name, extract(epoch FROM now() - state_change)::float8, "
            "pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name LIKE %(prefix)s AND split_part(application_name, ':', 3) <> %(node)s "
            "AND xact_start IS NOT NULL AND wait_event_type = 'Client' AND wait_event = 'ClientRead' "
            "AND state_change < now() - make_interval(secs => %(seconds)s)"
        )
        self.drop_gone_wakeups = q(
            f"DELETE FROM {{s}}.wakeups WHERE node NOT IN ({live.format(prefix='%s')})"
        )

    def _claims(self, q: Callable[[str], str]) -> None:
        """Claims: the ready steps of one queue or several, oldest claim rank first."""
        # No condition on the instance's status here (the claim checks it, claims.py ``_claim_transitions``):
        # with one, a plan made before the tables have statistics (a new schema, until autovacuum
        # analyzes them) joins through instances_status, scanning every RUNNING instance for each
        # READY token, and a prepared statement keeps that plan; without one, the instance can
        # only be reached through its primary key (docs/postgres-plans.md#claims-on-a-new-schema).
        # Oldest claim rank first: available_at aged by priority (wiggle/_engine/start_options.py),
        # an ordered scan of the tokens_claim index on the same expression (migration 0012). The
        # rank is the last column, after the token's and the instance's.
        claim = (
            f"SELECT {prefixed(TOKEN_COLS, 't')}, {prefixed(INSTANCE_COLS, 'i')}, {RANK} AS claim_rank, "
            # the attempts running under its concurrency-limit key (the fair order, limits.py)
            f"{KEY_RUNNING} AS key_running "
            "FROM {s}.tokens t JOIN {s}.instances i ON i.id = t.instance_id "
            "WHERE t.status = 'READY' AND t.queue = {queue} AND t.available_at <= %s "
            f"AND {UNDER_LIMIT} AND {RATE_OPEN} "
            "{past}"
            # ties (one millisecond, one priority) in id order: ids are time-sortable, so FIFO holds
            f"ORDER BY {RANK}, t.id LIMIT %s FOR UPDATE OF t, i SKIP LOCKED"
        )
        # a claim's further rounds (store.py): past the keys and steps it already found
        past = "AND t.limit_key <> ALL(%s::text[]) AND t.id <> ALL(%s::text[]) "

        def one(past: str) -> str:
            # One queue: an ordered scan of tokens_claim, stopping after LIMIT rows that could be locked.
            return q(claim.replace("{queue}", "%s").replace("{past}", past))

        def many(past: str) -> str:
            # Several: the same per queue (a "queue = ANY" scan would sort every due token), then
            # the oldest of those. It may lock up to LIMIT tokens per queue for the transaction's
            # few milliseconds; the ones not taken stay READY (next_ready_at makes pollers look again).
            return q(
                "SELECT c.* FROM unnest(%s::text[]) AS qs(queue) CROSS JOIN LATERAL ("
                + claim.replace("{queue}", "qs.queue").replace("{past}", past)
                + ") c ORDER BY c.claim_rank LIMIT %s"
            )

        # A claim's first round runs under its generic plan, planned once per connection: left to
        # PostgreSQL (plan_cache_mode = auto), a LIMIT given as a parameter makes the generic plan
        # look costlier than any custom one, and every claim was planned again (about 1 ms of the
        # database's CPU each, more than the claim itself: docs/postgres-plans.md#one-plan-per-claim).
        # The further rounds keep auto: with their "<> ALL" of unknown arrays the generic plan
        # expects one row and sorts every due token of the queue.
        self.claim_one_first, self.claim_many_first = one(""), many("")
        self.claim_one, self.claim_many = one(past), many(past)
        # A claim of a worker that gave some nodes back (wiggle/_server/unrunnable.py) passes
        # their steps over: (workflow, version, node) as three arrays, after the rounds' own.
        skip = "AND (i.workflow, i.version, t.node_id) NOT IN (SELECT * FROM unnest(%s::text[], %s::text[], %s::text[])) "
        self.claim_one_skipping, self.claim_many_skipping = one(skip), many(skip)
        self.claim_one_past_skipping, self.claim_many_past_skipping = one(past + skip), many(past + skip)
        self.generic_plans = "SET LOCAL plan_cache_mode = force_generic_plan"
        # The claim's transaction id (with its epoch), read with its first rows: their row locks
        # gave it one (NULL when none were found). A claim whose COMMIT's answer was lost asks
        # pg_xact_status whether it committed (claims.py ``ClaimAttempt.settle``).
        self.claim_xid = "SELECT pg_current_xact_id_if_assigned()::text"
        self.xact_status = "SELECT pg_xact_status(%s::xid8)"
        self.default_plans = "SET LOCAL plan_cache_mode TO DEFAULT"

    def _limits(self, q: Callable[[str], str]) -> None:
        """A claim's limits (limits.py Admission): key locks, queue limits, per-key rates."""
        # Concurrency limits (claims.py, limits.py Admission): the keys of the limited tokens a
        # claim found, each locked for the rest of its transaction (two-int advisory locks, apart
        # from the clock's and the migrations' one-bigint ones; in hash order, so two claims lock
        # in one order), then their RUNNING counts read after the locks, committed claims of other
        # servers included.
        self.lock_limit_keys = (
            "SELECT pg_advisory_xact_lock(%s, h) FROM "
            "(SELECT DISTINCT hashtext(k) AS h FROM unnest(%s::text[]) AS u(k) ORDER BY 1) AS keys"
        )
        # Queue limits (migration 0014; wiggle/_storage/queue_limits.py): a claim on limited queues
        # locks their rows (in queue order) and then counts their queue_held RUNNING tokens.
        limit_cols = "queue, max_running, rate_max, rate_period_millis, tat"
        self.queue_limits = q(f"SELECT {limit_cols} FROM {{s}}.queue_limits ORDER BY queue")
        self.lock_queue_limits = q(
            f"SELECT {limit_cols} FROM {{s}}.queue_limits WHERE queue = ANY(%s) ORDER BY queue FOR UPDATE"
        )
        self.queue_held = q(
            "SELECT queue, count(*) FROM {s}.tokens WHERE status = 'RUNNING' AND queue_held "
            "AND queue = ANY(%s) GROUP BY queue"
        )
        # A block of a fast rate's moments (rate_blocks.py): the row advances by k intervals from
        # its next moment, if that is due (queue_limits.rate_admit) and the row still says this
        # rate with no max_running; the block's first moment comes back (RETURNING: the new tat).
        interval = "(v.period::float8 / v.rate_max)"
        self.take_rate_block = q(
            f"UPDATE {{s}}.queue_limits AS l SET tat = GREATEST(l.tat, %s::float8) + v.k * {interval} "
            "FROM unnest(%s::text[], %s::int[], %s::int[], %s::bigint[]) AS v(queue, k, rate_max, period) "
            "WHERE l.queue = v.queue AND l.max_running = 0 AND l.rate_max = v.rate_max "
            f"AND l.rate_period_millis = v.period AND GREATEST(l.tat, %s::float8) "
            f"<= %s::float8 + GREATEST(0.0, 1.0 - {interval}) + 1e-6 "
            f"RETURNING l.queue, l.tat - v.k * {interval}"
        )
        self.set_tats = q(
            "UPDATE {s}.queue_limits AS l SET tat = v.tat FROM unnest(%s::text[], %s::float8[]) AS v(queue, tat) "
            "WHERE l.queue = v.queue"
        )
        # a changed rate starts with a full bucket (tat 0); the same rate keeps its state
        self.put_queue_limit = q(
            f"INSERT INTO {{s}}.queue_limits ({limit_cols}) VALUES (%s, %s, %s, %s, 0) "
            "ON CONFLICT (queue) DO UPDATE SET max_running = EXCLUDED.max_running, rate_max = EXCLUDED.rate_max, "
            "rate_period_millis = EXCLUDED.rate_period_millis, tat = CASE WHEN "
            "(l.rate_max, l.rate_period_millis) = (EXCLUDED.rate_max, EXCLUDED.rate_period_millis) "
            "THEN l.tat ELSE 0 END"
        ).replace("queue_limits (", "queue_limits AS l (", 1)
        self.delete_queue_limit = q("DELETE FROM {s}.queue_limits WHERE queue = %s")
        # Per-key rates (migration 0017; limits.py): the rate state of the keys a claim locked,
        # the database's clock, and the new states; the purge drops the moments long past.
        self.rate_tats = q("SELECT key, tat FROM {s}.rate_keys WHERE key = ANY(%s)")
        self.db_now = f"SELECT {DB_NOW_MILLIS}::float8"
        self.set_rate_tats = q(
            "INSERT INTO {s}.rate_keys AS r (key, tat) SELECT * FROM unnest(%s::text[], %s::float8[]) "
            "ON CONFLICT (key) DO UPDATE SET tat = EXCLUDED.tat"
        )
        # a moment past says nothing (a key without a row may go at once): a second's margin
        self.purge_rate_keys = q(
            f"DELETE FROM {{s}}.rate_keys WHERE tat < COALESCE(%s::float8, {DB_NOW_MILLIS}) - 1000"
        )
        # the one-round-trip admission's check: the keys' locks, then their room (migration 0020; limits.py)
        self.take_key_room = q("SELECT {s}.take_key_room(%s, %s::text[], %s::int[], %s::int[])")
        self.limit_held = q(f"SELECT k, {key_held('k')} FROM unnest(%s::text[]) AS u(k)")

    def _clock_duties(self, q: Callable[[str], str]) -> None:
        """The clock duties: due tokens and instances, orphans, the purge."""
        # per queue: its earliest due READY step, and how long ago (ms) the moment of that step's
        # key's rate came (NULL: no key's rate), which says whether the rate is what held it back
        # from a claim just made (store.py ``next_ready_at``); and the earliest moment of the keys'
        # rates that hold its other steps back. One reading of the rates' clock for both halves:
        # read row by row (clock_timestamp), a key's moment that came while the first half
        # scanned the queue's steps was in neither (a poll then slept its whole wait, 10 s, with
        # the step due)
        self.next_ready = q(
            f"WITH clock AS MATERIALIZED (SELECT {RATE_NOW} AS now) "
            "SELECT qs.queue, x.available_at, x.rate_since FROM unnest(%s::text[]) AS qs(queue), LATERAL ("
            "SELECT available_at, (SELECT (SELECT now FROM clock) - r.tat "
            "FROM {s}.rate_keys r WHERE r.key = t.rate_key) AS rate_since "
            "FROM {s}.tokens t WHERE status = 'READY' AND queue = qs.queue "
            # a step waiting for its key's slot is not due work: the end of an attempt of its key
            # wakes the queue (wiggle/_engine/limits.py); one waiting for its key's rate is due at
            # the rate's next moment (next_rate)
            f"AND {UNDER_LIMIT} AND {rate_open('(SELECT now FROM clock)')} ORDER BY available_at LIMIT 1) x "
            "UNION ALL "
            "SELECT t.queue, ceil(min(r.tat))::bigint, NULL::float8 FROM {s}.rate_keys r "
            "JOIN {s}.tokens t ON t.rate_key = r.key "
            "AND t.status = 'READY' AND t.rate_key <> '' WHERE t.queue = ANY(%s) "
            "AND r.tat > (SELECT now FROM clock) + 1 GROUP BY t.queue"
        )
        self.due = q(
            "(SELECT id FROM {s}.tokens WHERE status = 'RUNNING' AND lease_expires_at <= %(now)s "
            "ORDER BY lease_expires_at LIMIT %(n)s) UNION ALL "
            "(SELECT id FROM {s}.tokens WHERE (status = 'WAITING' OR (status = 'AWAITING' AND available_at > 0)) "
            "AND available_at <= %(now)s ORDER BY available_at LIMIT %(n)s) UNION ALL "
            # steps nobody claimed within their schedule-to-start limit (migration 0013's index)
            "(SELECT id FROM {s}.tokens WHERE status = 'READY' AND deadline_at > 0 AND deadline_at <= %(now)s "
            "ORDER BY deadline_at LIMIT %(n)s)"
        )
        self.next_due = q(
            "SELECT LEAST((SELECT min(lease_expires_at) FROM {s}.tokens WHERE status = 'RUNNING'), "
            "(SELECT min(available_at) FROM {s}.tokens "
            "WHERE status = 'WAITING' OR (status = 'AWAITING' AND available_at > 0)), "
            "(SELECT min(deadline_at) FROM {s}.instances WHERE status = 'RUNNING' AND deadline_at > 0), "
            "(SELECT min(deadline_at) FROM {s}.tokens WHERE status = 'READY' AND deadline_at > 0))"
        )
        # instances past their time limit (migration 0011's partial index instances_deadline)
        self.due_instances = q(
            "SELECT id FROM {s}.instances WHERE status = 'RUNNING' AND deadline_at > 0 AND deadline_at <= %s "
            "ORDER BY deadline_at LIMIT %s"
        )
        self.orphans = q(
            "SELECT c.id, c.parent_id FROM {s}.instances c LEFT JOIN {s}.instances p ON p.id = c.parent_id "
            "WHERE c.parent_id <> '' AND c.status = 'RUNNING' AND (p.id IS NULL OR p.status <> 'RUNNING') "
            "LIMIT %s"
        )
        self.purge = q(
            "WITH doomed AS (SELECT id, token_seq FROM {s}.instances "
            "WHERE status <> 'RUNNING' AND status <> 'SCHEDULED' AND finished_at < %s "
            "ORDER BY finished_at LIMIT %s FOR UPDATE SKIP LOCKED), "
            # an instance's tokens are '<id>.1' up to '<id>.<token_seq>' (wiggle/_engine/tokens.py
            # new_token), found by the primary key (migration 0024 dropped the index by instance_id)
            "gone_tokens AS (DELETE FROM {s}.tokens WHERE id = ANY(ARRAY("
            "SELECT d.id || '.' || n FROM doomed d, generate_series(1, d.token_seq) AS n))), "
            "gone_history AS (DELETE FROM {s}.history WHERE instance_id IN (SELECT id FROM doomed)) "
            "DELETE FROM {s}.instances WHERE id IN (SELECT id FROM doomed) RETURNING id"
        )

    def _definitions(self, q: Callable[[str], str]) -> None:
        """Definitions and version aliases."""
        self.insert_definition = q(
            "INSERT INTO {s}.definitions (name, version, definition, registered_at) VALUES (%s, %s, %s, %s) "
            "ON CONFLICT (name, version) DO NOTHING RETURNING registered_at"
        )
        self.definition = q(
            "SELECT definition, registered_at FROM {s}.definitions WHERE name = %s AND version = %s"
        )
        self.latest_version = q(
            "SELECT version FROM {s}.definitions WHERE name = %s ORDER BY registered_at DESC, seq DESC LIMIT 1"
        )
        self.definitions = q(
            "SELECT name, version, registered_at, definition FROM {s}.definitions "
            "WHERE %s = '' OR name = %s ORDER BY name, registered_at, seq"
        )
        # version aliases (migration 0008): the foreign key refuses a version that is not registered
        self.put_version_alias = q(
            "INSERT INTO {s}.version_aliases (workflow, alias, version) VALUES (%s, %s, %s) "
            "ON CONFLICT (workflow, alias) DO UPDATE SET version = EXCLUDED.version"
        )
        self.version_aliases = q(
            "SELECT alias, version FROM {s}.version_aliases WHERE workflow = %s ORDER BY alias"
        )
