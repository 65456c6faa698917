-- Grant protocol 6: keys and costs (issue 26; docs/keys.md, docs/how-it-works.md#keys-and-costs-grant-protocol-6).
--
-- A start may name a key (a tenant) and a cost (the slots it takes). A holder of cost c holds c
-- tokens of its task's list, so the list still bounds the sum of costs. The task row keeps, beside
-- its holders, the key and cost of every holder whose key is not empty or whose cost is not 1
-- (key_holders), so a key's cost in use is computed from the
-- row a token transaction locked and grows with the holders, never with the keys ever seen; and
-- what limits a key: the operator's override of KeyLimit (key_limit) and of named keys
-- (key_overrides), and the last requester's declared KeyLimit and named keys (declared_key_limit,
-- declared_keys).
--
-- A keyed task's waiters are rows of key_ticket, and each key that has waiters (or holders granted
-- while others waited) a row of task_key with its round-robin state: pass (the cost granted to it,
-- in the task's virtual time key_vtime), when it was last granted, its waiters and their top
-- priority. The task row counts its keyed tickets (key_waiting). Both tables are partitioned by
-- stripe (task id modulo 64, 0019_stripes.sql): token transactions of one stripe never overlap, and
-- those of different stripes touch different partitions, so under SERIALIZABLE key rows of
-- different tasks never make their transactions abort each other.
--
-- Task rows are never deleted (a task is retired), so the new tables have no foreign key: creating
-- one would lock task_definition while the partitions are made. Executions and submissions record
-- their key and cost (a schedule's runs take theirs from the registering host's options).
--
-- Binaries of protocol 5 refuse to grant from now on (ErrUpgradeRequired); they still heartbeat
-- and complete their executions, which were granted without a key (their releases leave
-- key_holders alone: a holder whose term is gone no longer counts).

CREATE TABLE taskling.task_key (
    stripe       smallint NOT NULL,
    task_id      bigint   NOT NULL,
    key          text     NOT NULL,
    pass         bigint   NOT NULL DEFAULT 0,
    granted_us   bigint   NOT NULL DEFAULT 0,
    waiting      integer  NOT NULL DEFAULT 0,
    top_priority integer  NOT NULL DEFAULT 0,
    PRIMARY KEY (stripe, task_id, key),
    CHECK (stripe = task_id % 64)
) PARTITION BY LIST (stripe);

-- The keys with waiters, in round-robin order.
CREATE INDEX task_key_round_idx ON taskling.task_key (stripe, task_id, top_priority DESC, pass, granted_us, key)
    WHERE waiting > 0;

CREATE TABLE taskling.key_ticket (
    stripe       smallint NOT NULL,
    task_id      bigint   NOT NULL,
    id           bigint   NOT NULL,
    key          text     NOT NULL,
    cost         integer  NOT NULL,
    priority     integer  NOT NULL,
    session_id   bigint   NOT NULL,
    queued_us    bigint   NOT NULL,
    offered_us   bigint   NOT NULL DEFAULT 0,
    threshold_us bigint   NOT NULL,
    window_us    bigint   NOT NULL,
    -- A direct ticket (a plain WaitForSlot start) is granted by the transaction that frees its
    -- slot, as a row of taskling.handoff (grant protocol 4); the others are offered the slot.
    direct       boolean  NOT NULL DEFAULT false,
    PRIMARY KEY (stripe, task_id, id),
    CHECK (stripe = task_id % 64)
) PARTITION BY LIST (stripe);

-- A key's line: higher priority first, then first in, first out.
CREATE INDEX key_ticket_key_idx ON taskling.key_ticket (stripe, task_id, key, priority DESC, queued_us, id);
-- The task's oldest tickets (a starving ticket reserves capacity).
CREATE INDEX key_ticket_age_idx ON taskling.key_ticket (stripe, task_id, queued_us, id);

CREATE TABLE taskling.task_key_00 PARTITION OF taskling.task_key FOR VALUES IN (0);
CREATE TABLE taskling.task_key_01 PARTITION OF taskling.task_key FOR VALUES IN (1);
CREATE TABLE taskling.task_key_02 PARTITION OF taskling.task_key FOR VALUES IN (2);
CREATE TABLE taskling.task_key_03 PARTITION OF taskling.task_key FOR VALUES IN (3);
CREATE TABLE taskling.task_key_04 PARTITION OF taskling.task_key FOR VALUES IN (4);
CREATE TABLE taskling.task_key_05 PARTITION OF taskling.task_key FOR VALUES IN (5);
CREATE TABLE taskling.task_key_06 PARTITION OF taskling.task_key FOR VALUES IN (6);
CREATE TABLE taskling.task_key_07 PARTITION OF taskling.task_key FOR VALUES IN (7);
CREATE TABLE taskling.task_key_08 PARTITION OF taskling.task_key FOR VALUES IN (8);
CREATE TABLE taskling.task_key_09 PARTITION OF taskling.task_key FOR VALUES IN (9);
CREATE TABLE taskling.task_key_10 PARTITION OF taskling.task_key FOR VALUES IN (10);
CREATE TABLE taskling.task_key_11 PARTITION OF taskling.task_key FOR VALUES IN (11);
CREATE TABLE taskling.task_key_12 PARTITION OF taskling.task_key FOR VALUES IN (12);
CREATE TABLE taskling.task_key_13 PARTITION OF taskling.task_key FOR VALUES IN (13);
CREATE TABLE taskling.task_key_14 PARTITION OF taskling.task_key FOR VALUES IN (14);
CREATE TABLE taskling.task_key_15 PARTITION OF taskling.task_key FOR VALUES IN (15);
CREATE TABLE taskling.task_key_16 PARTITION OF taskling.task_key FOR VALUES IN (16);
CREATE TABLE taskling.task_key_17 PARTITION OF taskling.task_key FOR VALUES IN (17);
CREATE TABLE taskling.task_key_18 PARTITION OF taskling.task_key FOR VALUES IN (18);
CREATE TABLE taskling.task_key_19 PARTITION OF taskling.task_key FOR VALUES IN (19);
CREATE TABLE taskling.task_key_20 PARTITION OF taskling.task_key FOR VALUES IN (20);
CREATE TABLE taskling.task_key_21 PARTITION OF taskling.task_key FOR VALUES IN (21);
CREATE TABLE taskling.task_key_22 PARTITION OF taskling.task_key FOR VALUES IN (22);
CREATE TABLE taskling.task_key_23 PARTITION OF taskling.task_key FOR VALUES IN (23);
CREATE TABLE taskling.task_key_24 PARTITION OF taskling.task_key FOR VALUES IN (24);
CREATE TABLE taskling.task_key_25 PARTITION OF taskling.task_key FOR VALUES IN (25);
CREATE TABLE taskling.task_key_26 PARTITION OF taskling.task_key FOR VALUES IN (26);
CREATE TABLE taskling.task_key_27 PARTITION OF taskling.task_key FOR VALUES IN (27);
CREATE TABLE taskling.task_key_28 PARTITION OF taskling.task_key FOR VALUES IN (28);
CREATE TABLE taskling.task_key_29 PARTITION OF taskling.task_key FOR VALUES IN (29);
CREATE TABLE taskling.task_key_30 PARTITION OF taskling.task_key FOR VALUES IN (30);
CREATE TABLE taskling.task_key_31 PARTITION OF taskling.task_key FOR VALUES IN (31);
CREATE TABLE taskling.task_key_32 PARTITION OF taskling.task_key FOR VALUES IN (32);
CREATE TABLE taskling.task_key_33 PARTITION OF taskling.task_key FOR VALUES IN (33);
CREATE TABLE taskling.task_key_34 PARTITION OF taskling.task_key FOR VALUES IN (34);
CREATE TABLE taskling.task_key_35 PARTITION OF taskling.task_key FOR VALUES IN (35);
CREATE TABLE taskling.task_key_36 PARTITION OF taskling.task_key FOR VALUES IN (36);
CREATE TABLE taskling.task_key_37 PARTITION OF taskling.task_key FOR VALUES IN (37);
CREATE TABLE taskling.task_key_38 PARTITION OF taskling.task_key FOR VALUES IN (38);
CREATE TABLE taskling.task_key_39 PARTITION OF taskling.task_key FOR VALUES IN (39);
CREATE TABLE taskling.task_key_40 PARTITION OF taskling.task_key FOR VALUES IN (40);
CREATE TABLE taskling.task_key_41 PARTITION OF taskling.task_key FOR VALUES IN (41);
CREATE TABLE taskling.task_key_42 PARTITION OF taskling.task_key FOR VALUES IN (42);
CREATE TABLE taskling.task_key_43 PARTITION OF taskling.task_key FOR VALUES IN (43);
CREATE TABLE taskling.task_key_44 PARTITION OF taskling.task_key FOR VALUES IN (44);
CREATE TABLE taskling.task_key_45 PARTITION OF taskling.task_key FOR VALUES IN (45);
CREATE TABLE taskling.task_key_46 PARTITION OF taskling.task_key FOR VALUES IN (46);
CREATE TABLE taskling.task_key_47 PARTITION OF taskling.task_key FOR VALUES IN (47);
CREATE TABLE taskling.task_key_48 PARTITION OF taskling.task_key FOR VALUES IN (48);
CREATE TABLE taskling.task_key_49 PARTITION OF taskling.task_key FOR VALUES IN (49);
CREATE TABLE taskling.task_key_50 PARTITION OF taskling.task_key FOR VALUES IN (50);
CREATE TABLE taskling.task_key_51 PARTITION OF taskling.task_key FOR VALUES IN (51);
CREATE TABLE taskling.task_key_52 PARTITION OF taskling.task_key FOR VALUES IN (52);
CREATE TABLE taskling.task_key_53 PARTITION OF taskling.task_key FOR VALUES IN (53);
CREATE TABLE taskling.task_key_54 PARTITION OF taskling.task_key FOR VALUES IN (54);
CREATE TABLE taskling.task_key_55 PARTITION OF taskling.task_key FOR VALUES IN (55);
CREATE TABLE taskling.task_key_56 PARTITION OF taskling.task_key FOR VALUES IN (56);
CREATE TABLE taskling.task_key_57 PARTITION OF taskling.task_key FOR VALUES IN (57);
CREATE TABLE taskling.task_key_58 PARTITION OF taskling.task_key FOR VALUES IN (58);
CREATE TABLE taskling.task_key_59 PARTITION OF taskling.task_key FOR VALUES IN (59);
CREATE TABLE taskling.task_key_60 PARTITION OF taskling.task_key FOR VALUES IN (60);
CREATE TABLE taskling.task_key_61 PARTITION OF taskling.task_key FOR VALUES IN (61);
CREATE TABLE taskling.task_key_62 PARTITION OF taskling.task_key FOR VALUES IN (62);
CREATE TABLE taskling.task_key_63 PARTITION OF taskling.task_key FOR VALUES IN (63);

CREATE TABLE taskling.key_ticket_00 PARTITION OF taskling.key_ticket FOR VALUES IN (0);
CREATE TABLE taskling.key_ticket_01 PARTITION OF taskling.key_ticket FOR VALUES IN (1);
CREATE TABLE taskling.key_ticket_02 PARTITION OF taskling.key_ticket FOR VALUES IN (2);
CREATE TABLE taskling.key_ticket_03 PARTITION OF taskling.key_ticket FOR VALUES IN (3);
CREATE TABLE taskling.key_ticket_04 PARTITION OF taskling.key_ticket FOR VALUES IN (4);
CREATE TABLE taskling.key_ticket_05 PARTITION OF taskling.key_ticket FOR VALUES IN (5);
CREATE TABLE taskling.key_ticket_06 PARTITION OF taskling.key_ticket FOR VALUES IN (6);
CREATE TABLE taskling.key_ticket_07 PARTITION OF taskling.key_ticket FOR VALUES IN (7);
CREATE TABLE taskling.key_ticket_08 PARTITION OF taskling.key_ticket FOR VALUES IN (8);
CREATE TABLE taskling.key_ticket_09 PARTITION OF taskling.key_ticket FOR VALUES IN (9);
CREATE TABLE taskling.key_ticket_10 PARTITION OF taskling.key_ticket FOR VALUES IN (10);
CREATE TABLE taskling.key_ticket_11 PARTITION OF taskling.key_ticket FOR VALUES IN (11);
CREATE TABLE taskling.key_ticket_12 PARTITION OF taskling.key_ticket FOR VALUES IN (12);
CREATE TABLE taskling.key_ticket_13 PARTITION OF taskling.key_ticket FOR VALUES IN (13);
CREATE TABLE taskling.key_ticket_14 PARTITION OF taskling.key_ticket FOR VALUES IN (14);
CREATE TABLE taskling.key_ticket_15 PARTITION OF taskling.key_ticket FOR VALUES IN (15);
CREATE TABLE taskling.key_ticket_16 PARTITION OF taskling.key_ticket FOR VALUES IN (16);
CREATE TABLE taskling.key_ticket_17 PARTITION OF taskling.key_ticket FOR VALUES IN (17);
CREATE TABLE taskling.key_ticket_18 PARTITION OF taskling.key_ticket FOR VALUES IN (18);
CREATE TABLE taskling.key_ticket_19 PARTITION OF taskling.key_ticket FOR VALUES IN (19);
CREATE TABLE taskling.key_ticket_20 PARTITION OF taskling.key_ticket FOR VALUES IN (20);
CREATE TABLE taskling.key_ticket_21 PARTITION OF taskling.key_ticket FOR VALUES IN (21);
CREATE TABLE taskling.key_ticket_22 PARTITION OF taskling.key_ticket FOR VALUES IN (22);
CREATE TABLE taskling.key_ticket_23 PARTITION OF taskling.key_ticket FOR VALUES IN (23);
CREATE TABLE taskling.key_ticket_24 PARTITION OF taskling.key_ticket FOR VALUES IN (24);
CREATE TABLE taskling.key_ticket_25 PARTITION OF taskling.key_ticket FOR VALUES IN (25);
CREATE TABLE taskling.key_ticket_26 PARTITION OF taskling.key_ticket FOR VALUES IN (26);
CREATE TABLE taskling.key_ticket_27 PARTITION OF taskling.key_ticket FOR VALUES IN (27);
CREATE TABLE taskling.key_ticket_28 PARTITION OF taskling.key_ticket FOR VALUES IN (28);
CREATE TABLE taskling.key_ticket_29 PARTITION OF taskling.key_ticket FOR VALUES IN (29);
CREATE TABLE taskling.key_ticket_30 PARTITION OF taskling.key_ticket FOR VALUES IN (30);
CREATE TABLE taskling.key_ticket_31 PARTITION OF taskling.key_ticket FOR VALUES IN (31);
CREATE TABLE taskling.key_ticket_32 PARTITION OF taskling.key_ticket FOR VALUES IN (32);
CREATE TABLE taskling.key_ticket_33 PARTITION OF taskling.key_ticket FOR VALUES IN (33);
CREATE TABLE taskling.key_ticket_34 PARTITION OF taskling.key_ticket FOR VALUES IN (34);
CREATE TABLE taskling.key_ticket_35 PARTITION OF taskling.key_ticket FOR VALUES IN (35);
CREATE TABLE taskling.key_ticket_36 PARTITION OF taskling.key_ticket FOR VALUES IN (36);
CREATE TABLE taskling.key_ticket_37 PARTITION OF taskling.key_ticket FOR VALUES IN (37);
CREATE TABLE taskling.key_ticket_38 PARTITION OF taskling.key_ticket FOR VALUES IN (38);
CREATE TABLE taskling.key_ticket_39 PARTITION OF taskling.key_ticket FOR VALUES IN (39);
CREATE TABLE taskling.key_ticket_40 PARTITION OF taskling.key_ticket FOR VALUES IN (40);
CREATE TABLE taskling.key_ticket_41 PARTITION OF taskling.key_ticket FOR VALUES IN (41);
CREATE TABLE taskling.key_ticket_42 PARTITION OF taskling.key_ticket FOR VALUES IN (42);
CREATE TABLE taskling.key_ticket_43 PARTITION OF taskling.key_ticket FOR VALUES IN (43);
CREATE TABLE taskling.key_ticket_44 PARTITION OF taskling.key_ticket FOR VALUES IN (44);
CREATE TABLE taskling.key_ticket_45 PARTITION OF taskling.key_ticket FOR VALUES IN (45);
CREATE TABLE taskling.key_ticket_46 PARTITION OF taskling.key_ticket FOR VALUES IN (46);
CREATE TABLE taskling.key_ticket_47 PARTITION OF taskling.key_ticket FOR VALUES IN (47);
CREATE TABLE taskling.key_ticket_48 PARTITION OF taskling.key_ticket FOR VALUES IN (48);
CREATE TABLE taskling.key_ticket_49 PARTITION OF taskling.key_ticket FOR VALUES IN (49);
CREATE TABLE taskling.key_ticket_50 PARTITION OF taskling.key_ticket FOR VALUES IN (50);
CREATE TABLE taskling.key_ticket_51 PARTITION OF taskling.key_ticket FOR VALUES IN (51);
CREATE TABLE taskling.key_ticket_52 PARTITION OF taskling.key_ticket FOR VALUES IN (52);
CREATE TABLE taskling.key_ticket_53 PARTITION OF taskling.key_ticket FOR VALUES IN (53);
CREATE TABLE taskling.key_ticket_54 PARTITION OF taskling.key_ticket FOR VALUES IN (54);
CREATE TABLE taskling.key_ticket_55 PARTITION OF taskling.key_ticket FOR VALUES IN (55);
CREATE TABLE taskling.key_ticket_56 PARTITION OF taskling.key_ticket FOR VALUES IN (56);
CREATE TABLE taskling.key_ticket_57 PARTITION OF taskling.key_ticket FOR VALUES IN (57);
CREATE TABLE taskling.key_ticket_58 PARTITION OF taskling.key_ticket FOR VALUES IN (58);
CREATE TABLE taskling.key_ticket_59 PARTITION OF taskling.key_ticket FOR VALUES IN (59);
CREATE TABLE taskling.key_ticket_60 PARTITION OF taskling.key_ticket FOR VALUES IN (60);
CREATE TABLE taskling.key_ticket_61 PARTITION OF taskling.key_ticket FOR VALUES IN (61);
CREATE TABLE taskling.key_ticket_62 PARTITION OF taskling.key_ticket FOR VALUES IN (62);
CREATE TABLE taskling.key_ticket_63 PARTITION OF taskling.key_ticket FOR VALUES IN (63);

-- The tables every token transaction writes are altered last, so that their locks are held only
-- for the end of this transaction (the partitions above take a while to create, and a holder's
-- heartbeat waits for these locks).
ALTER TABLE taskling.task_definition
    -- "E:<execution>,K:<key, hex of its UTF-8>,C:<cost>|…": the holders whose key is not empty or
    -- whose cost is not 1.
    ADD COLUMN key_holders text NOT NULL DEFAULT '',
    -- The operator's override of KeyLimit (0: no key limit; NULL: not overridden).
    ADD COLUMN key_limit integer,
    -- The operator's overrides of named keys: "K:<key, hex>,L:<limit>|…".
    ADD COLUMN key_overrides text NOT NULL DEFAULT '',
    -- The last requester's KeyLimit and named keys (the same format).
    ADD COLUMN declared_key_limit integer,
    ADD COLUMN declared_keys text NOT NULL DEFAULT '',
    -- The task's virtual time: a key that starts waiting joins the round robin at it.
    ADD COLUMN key_vtime bigint NOT NULL DEFAULT 0,
    -- How many rows of key_ticket the task has.
    ADD COLUMN key_waiting integer NOT NULL DEFAULT 0,
    ADD CONSTRAINT task_definition_key_limit_check CHECK (key_limit BETWEEN 0 AND 10000);

ALTER TABLE taskling.task_execution
    ADD COLUMN key text NOT NULL DEFAULT '',
    ADD COLUMN cost integer NOT NULL DEFAULT 1;

-- A grant to a direct ticket carries the ticket's key and cost to the execution its waiter takes.
ALTER TABLE taskling.handoff
    ADD COLUMN key text NOT NULL DEFAULT '',
    ADD COLUMN cost integer NOT NULL DEFAULT 1;

ALTER TABLE taskling.submission
    ADD COLUMN key text NOT NULL DEFAULT '',
    ADD COLUMN cost integer NOT NULL DEFAULT 1 CHECK (cost BETWEEN 1 AND 10000);

-- The waiting submissions with a key: a task with none claims in the plain order of
-- submission_waiting_idx instead of ranking its whole backlog by key.
CREATE INDEX submission_keyed_waiting_idx ON taskling.submission (task_id)
    WHERE key <> '' AND status = taskling.submission_status('waiting');

-- live_key_tickets lists the live keyed tickets of task $1 (alive while their session's
-- heartbeat, or their queueing, is within their threshold), with their waiters' hosts.
CREATE FUNCTION taskling.live_key_tickets(task bigint)
RETURNS TABLE (ticket bigint, key text, cost integer, priority integer, host text, queued timestamptz)
LANGUAGE sql VOLATILE AS $$
SELECT x.id, x.key, x.cost, x.priority, coalesce(s.host_name, ''), timestamptz 'epoch' + x.queued_us * interval '1 microsecond'
FROM taskling.key_ticket x
LEFT JOIN taskling.session s ON s.id = x.session_id
WHERE x.stripe = task % 64 AND x.task_id = task
  AND clock_timestamp() - greatest(timestamptz 'epoch' + x.queued_us * interval '1 microsecond', s.last_heartbeat)
      <= x.threshold_us * interval '1 microsecond'
$$;

-- key_holders lists the executions a task row's holders column names with their keys and costs
-- (key_holders; every other holder is key '', cost 1).
CREATE FUNCTION taskling.key_holders(holders text, key_holders text)
RETURNS TABLE (exec bigint, key text, cost integer)
LANGUAGE sql IMMUTABLE AS $$
SELECT h.exec, coalesce(k.key, ''), coalesce(k.cost, 1)
FROM (SELECT (regexp_match(t, 'E:([0-9]+)'))[1]::bigint AS exec
      FROM unnest(string_to_array(nullif(holders, ''), '|')) AS t) h
LEFT JOIN (SELECT (regexp_match(t, 'E:([0-9]+)'))[1]::bigint AS exec,
                  convert_from(decode((regexp_match(t, 'K:([0-9a-f]*)'))[1], 'hex'), 'UTF8') AS key,
                  (regexp_match(t, 'C:([0-9]+)'))[1]::integer AS cost
           FROM unnest(string_to_array(nullif(key_holders, ''), '|')) AS t) k ON k.exec = h.exec
$$;

-- The views of the task lists count keyed waiters with the row's, and task_summary adds what
-- the row holds of keys and how many keys have waiters.
CREATE OR REPLACE VIEW taskling.task_state AS
SELECT d.id, d.application_name, d.task_name, k.used::integer AS used, k.total AS total,
    (w.waiting + kw.waiting)::integer AS waiting, k.total > 0 AND k.used >= k.total AS at_limit, d.retired_at IS NOT NULL AS retired
FROM taskling.task_definition d
CROSS JOIN LATERAL taskling.task_slots(d) k
CROSS JOIN LATERAL (SELECT count(*) AS waiting FROM taskling.live_tickets(d.queue)) w
CROSS JOIN LATERAL (SELECT count(*) AS waiting FROM taskling.live_key_tickets(d.id) WHERE d.key_waiting > 0) kw;

CREATE OR REPLACE VIEW taskling.task_summary AS
SELECT d.id, d.application_name, d.task_name, d.tokens, d.fence,
    d.concurrency_limit, d.enabled, d.death_mode, d.keep_alive_interval, d.keep_alive_death_threshold,
    d.override_threshold, d.overrides_updated_at, d.declared_limit, d.declared_by,
    dd.other_limit, dd.other_host, dd.at AS dispute_at,
    coalesce(h.ids, '{}') AS holder_ids, coalesce(h.alive, '{}') AS holder_alive,
    l.id AS last_id, l.status AS last_status, l.started_at AS last_started_at, w.waiting + kw.waiting AS waiting,
    least(w.oldest, kw.oldest) AS oldest,
    d.retired_at, d.retired_by, d.retired_enabled, sc.task_id IS NOT NULL AS has_schedule,
    sc.retired_at AS schedule_retired_at, sc.retired_by AS schedule_retired_by,
    td.enabled AS declared_enabled, td.death_mode AS declared_death_mode, td.keep_alive_interval AS declared_interval,
    td.keep_alive_death_threshold AS declared_threshold, td.override_threshold AS declared_override_threshold,
    td.declared_by AS declaration_by, td.declared_at AS declaration_at,
    d.holders, d.key_holders, d.key_limit, d.key_overrides, d.declared_key_limit, d.declared_keys, kw.keys AS keys_waiting
FROM taskling.task_definition d
LEFT JOIN taskling.schedule sc ON sc.task_id = d.id
LEFT JOIN taskling.task_declaration td ON td.task_id = d.id
LEFT JOIN taskling.declaration_dispute dd ON dd.task_id = d.id AND clock_timestamp() - dd.at < interval '10 minutes'
LEFT JOIN LATERAL (
    SELECT count(*) AS waiting, min(q.queued) AS oldest FROM taskling.live_tickets(d.queue) q
) w ON true
LEFT JOIN LATERAL (
    SELECT count(*) AS waiting, min(q.queued) AS oldest, count(DISTINCT q.key) AS keys
    FROM taskling.live_key_tickets(d.id) q WHERE d.key_waiting > 0
) kw ON true
LEFT JOIN LATERAL (
    SELECT array_agg(e.id ORDER BY e.id) AS ids,
           array_agg(taskling.execution_status(e, x, s.last_heartbeat) = 'in_progress' ORDER BY e.id) AS alive
    FROM taskling.task_execution e
    LEFT JOIN taskling.execution_end x ON x.execution_id = e.id
    LEFT JOIN taskling.session s ON s.id = e.session_id
    WHERE e.id IN (SELECT m[1]::bigint FROM regexp_matches(d.tokens || '|' || d.holders, '(?:G|E):([0-9]+)', 'g') m)
) h ON true
LEFT JOIN LATERAL (
    SELECT e.id, taskling.execution_status(e, x, s.last_heartbeat) AS status, e.started_at
    FROM taskling.task_execution e
    LEFT JOIN taskling.execution_end x ON x.execution_id = e.id
    LEFT JOIN taskling.session s ON s.id = e.session_id
    WHERE e.task_id = d.id
    ORDER BY e.started_at DESC, e.id DESC
    LIMIT 1
) l ON true;

UPDATE taskling.protocol SET version = 6, changed_at = clock_timestamp();
