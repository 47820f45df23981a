-- Schedules (docs/semantics.md#schedules): the schedule rows, one row per tick that started an
-- instance (its primary key makes a second instance for one tick impossible, even across a change
-- of clock leader), and on each instance the schedule and tick that started it.
ALTER TABLE instances
    ADD COLUMN schedule_id text COLLATE "C" NOT NULL DEFAULT '',
    ADD COLUMN schedule_tick_at bigint NOT NULL DEFAULT 0;

CREATE TABLE schedules (
    id            text COLLATE "C" PRIMARY KEY,
    workflow      text COLLATE "C" NOT NULL,
    paused        boolean NOT NULL,
    next_tick_at  bigint NOT NULL,
    buffered      boolean NOT NULL,
    revision      bigint NOT NULL,
    body          bytea  NOT NULL  -- the whole Schedule as JSON (wiggle/_engine/schedules.py)
);
-- the clock leader's look-up of due schedules
CREATE INDEX schedules_due ON schedules (next_tick_at) WHERE NOT paused;

CREATE TABLE schedule_ticks (
    schedule_id  text COLLATE "C" NOT NULL,
    tick_at      bigint NOT NULL,
    instance_id  text COLLATE "C" NOT NULL,
    fired_at     bigint NOT NULL,
    PRIMARY KEY (schedule_id, tick_at)
);
