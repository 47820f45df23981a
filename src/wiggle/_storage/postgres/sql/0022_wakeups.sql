-- Wake-ups wanted (wiggle/_storage/postgres/wakeups.py): which server nodes of this schema have
-- someone waiting to be woken, so that the others send their NOTIFYs only when a node wants them.
-- Every connection that LISTENs reads every NOTIFY of the database in a transaction of its own,
-- whatever channel it listens on; under load nobody waits and such NOTIFYs woke nobody
-- (docs/architecture.md, "Scaling").
-- kind 'node': the node filters its NOTIFYs by this table (a node of an older version writes no
-- such row, and while one is connected every node sends all its NOTIFYs); 'work': a poll of the
-- node waits for steps of the queue ``subject``; 'finished': a call of the node waits for an
-- instance to finish (subject '').
CREATE TABLE wakeups (
    node text COLLATE "C" NOT NULL,
    kind text COLLATE "C" NOT NULL,
    subject text COLLATE "C" NOT NULL,
    PRIMARY KEY (kind, subject, node)
);
