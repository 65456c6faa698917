-- Grant protocol 7: rates (issue 27; docs/rates.md, docs/how-it-works.md#rates-grant-protocol-7).
--
-- A task may be under a rate (TaskSettings.Rate: at most Count starts per Per, Burst at once) and
-- each key under one (KeyRate, or a named key's). A rate is a GCRA (generic cell rate algorithm)
-- on the database clock: its state is one time, the theoretical arrival time (tat_us, µs since the
-- Unix epoch), which every grant of cost c moves to max(tat, now) + c·Per/Count. A start of cost
-- c fits the rate when max(tat, now) + c·Per/Count <= now + Burst·Per/Count; so in any half-open
-- window of length Per the grants add up to at most Count + Burst - 1 (docs/rates.md proves it).
--
-- task_rate holds, per task that ever had a rate, the operator's overrides (rate, key_rate: NULL
-- not overridden, '' overridden to none; key_rates: named keys' "K:<key, hex>,R:<rate>|…"), the
-- last requester's declaration (declared_*) and the task's tat. key_rate holds one tat per key
-- whose rate is not spent: a row is deleted once its tat has passed and its key has no holder or
-- waiter (a spent tat and no row decide the same). A rate is written "<count>/<per in µs>/<burst>";
-- tat_rate is the rate a tat was moved under: when the rate in force changes, the units still owed
-- are counted at the new rate's interval, so that a raised rate admits at once.
-- Both tables are partitioned by stripe (task id modulo 64, 0019_stripes.sql), like task_key: the
-- token transactions of a stripe are serialized by its lock, and those of different stripes touch
-- different partitions, so under SERIALIZABLE rate rows of different tasks never make their
-- transactions abort each other.
--
-- Binaries of protocol 6 refuse to grant from now on (ErrUpgradeRequired): they do not know rates.
-- They still heartbeat and complete their executions.

CREATE TABLE taskling.task_rate (
    stripe             smallint NOT NULL,
    task_id            bigint   NOT NULL,
    rate               text,
    key_rate           text,
    key_rates          text     NOT NULL DEFAULT '',
    declared_rate      text     NOT NULL DEFAULT '',
    declared_key_rate  text     NOT NULL DEFAULT '',
    declared_key_rates text     NOT NULL DEFAULT '',
    tat_us             bigint   NOT NULL DEFAULT 0,
    tat_rate           text     NOT NULL DEFAULT '',
    PRIMARY KEY (stripe, task_id),
    CHECK (stripe = task_id % 64)
) PARTITION BY LIST (stripe);

CREATE TABLE taskling.key_rate (
    stripe  smallint NOT NULL,
    task_id bigint   NOT NULL,
    key     text     NOT NULL,
    tat_us  bigint   NOT NULL,
    tat_rate text    NOT NULL DEFAULT '',
    PRIMARY KEY (stripe, task_id, key),
    CHECK (stripe = task_id % 64)
) PARTITION BY LIST (stripe);

CREATE TABLE taskling.task_rate_00 PARTITION OF taskling.task_rate FOR VALUES IN (0);
CREATE TABLE taskling.task_rate_01 PARTITION OF taskling.task_rate FOR VALUES IN (1);
CREATE TABLE taskling.task_rate_02 PARTITION OF taskling.task_rate FOR VALUES IN (2);
CREATE TABLE taskling.task_rate_03 PARTITION OF taskling.task_rate FOR VALUES IN (3);
CREATE TABLE taskling.task_rate_04 PARTITION OF taskling.task_rate FOR VALUES IN (4);
CREATE TABLE taskling.task_rate_05 PARTITION OF taskling.task_rate FOR VALUES IN (5);
CREATE TABLE taskling.task_rate_06 PARTITION OF taskling.task_rate FOR VALUES IN (6);
CREATE TABLE taskling.task_rate_07 PARTITION OF taskling.task_rate FOR VALUES IN (7);
CREATE TABLE taskling.task_rate_08 PARTITION OF taskling.task_rate FOR VALUES IN (8);
CREATE TABLE taskling.task_rate_09 PARTITION OF taskling.task_rate FOR VALUES IN (9);
CREATE TABLE taskling.task_rate_10 PARTITION OF taskling.task_rate FOR VALUES IN (10);
CREATE TABLE taskling.task_rate_11 PARTITION OF taskling.task_rate FOR VALUES IN (11);
CREATE TABLE taskling.task_rate_12 PARTITION OF taskling.task_rate FOR VALUES IN (12);
CREATE TABLE taskling.task_rate_13 PARTITION OF taskling.task_rate FOR VALUES IN (13);
CREATE TABLE taskling.task_rate_14 PARTITION OF taskling.task_rate FOR VALUES IN (14);
CREATE TABLE taskling.task_rate_15 PARTITION OF taskling.task_rate FOR VALUES IN (15);
CREATE TABLE taskling.task_rate_16 PARTITION OF taskling.task_rate FOR VALUES IN (16);
CREATE TABLE taskling.task_rate_17 PARTITION OF taskling.task_rate FOR VALUES IN (17);
CREATE TABLE taskling.task_rate_18 PARTITION OF taskling.task_rate FOR VALUES IN (18);
CREATE TABLE taskling.task_rate_19 PARTITION OF taskling.task_rate FOR VALUES IN (19);
CREATE TABLE taskling.task_rate_20 PARTITION OF taskling.task_rate FOR VALUES IN (20);
CREATE TABLE taskling.task_rate_21 PARTITION OF taskling.task_rate FOR VALUES IN (21);
CREATE TABLE taskling.task_rate_22 PARTITION OF taskling.task_rate FOR VALUES IN (22);
CREATE TABLE taskling.task_rate_23 PARTITION OF taskling.task_rate FOR VALUES IN (23);
CREATE TABLE taskling.task_rate_24 PARTITION OF taskling.task_rate FOR VALUES IN (24);
CREATE TABLE taskling.task_rate_25 PARTITION OF taskling.task_rate FOR VALUES IN (25);
CREATE TABLE taskling.task_rate_26 PARTITION OF taskling.task_rate FOR VALUES IN (26);
CREATE TABLE taskling.task_rate_27 PARTITION OF taskling.task_rate FOR VALUES IN (27);
CREATE TABLE taskling.task_rate_28 PARTITION OF taskling.task_rate FOR VALUES IN (28);
CREATE TABLE taskling.task_rate_29 PARTITION OF taskling.task_rate FOR VALUES IN (29);
CREATE TABLE taskling.task_rate_30 PARTITION OF taskling.task_rate FOR VALUES IN (30);
CREATE TABLE taskling.task_rate_31 PARTITION OF taskling.task_rate FOR VALUES IN (31);
CREATE TABLE taskling.task_rate_32 PARTITION OF taskling.task_rate FOR VALUES IN (32);
CREATE TABLE taskling.task_rate_33 PARTITION OF taskling.task_rate FOR VALUES IN (33);
CREATE TABLE taskling.task_rate_34 PARTITION OF taskling.task_rate FOR VALUES IN (34);
CREATE TABLE taskling.task_rate_35 PARTITION OF taskling.task_rate FOR VALUES IN (35);
CREATE TABLE taskling.task_rate_36 PARTITION OF taskling.task_rate FOR VALUES IN (36);
CREATE TABLE taskling.task_rate_37 PARTITION OF taskling.task_rate FOR VALUES IN (37);
CREATE TABLE taskling.task_rate_38 PARTITION OF taskling.task_rate FOR VALUES IN (38);
CREATE TABLE taskling.task_rate_39 PARTITION OF taskling.task_rate FOR VALUES IN (39);
CREATE TABLE taskling.task_rate_40 PARTITION OF taskling.task_rate FOR VALUES IN (40);
CREATE TABLE taskling.task_rate_41 PARTITION OF taskling.task_rate FOR VALUES IN (41);
CREATE TABLE taskling.task_rate_42 PARTITION OF taskling.task_rate FOR VALUES IN (42);
CREATE TABLE taskling.task_rate_43 PARTITION OF taskling.task_rate FOR VALUES IN (43);
CREATE TABLE taskling.task_rate_44 PARTITION OF taskling.task_rate FOR VALUES IN (44);
CREATE TABLE taskling.task_rate_45 PARTITION OF taskling.task_rate FOR VALUES IN (45);
CREATE TABLE taskling.task_rate_46 PARTITION OF taskling.task_rate FOR VALUES IN (46);
CREATE TABLE taskling.task_rate_47 PARTITION OF taskling.task_rate FOR VALUES IN (47);
CREATE TABLE taskling.task_rate_48 PARTITION OF taskling.task_rate FOR VALUES IN (48);
CREATE TABLE taskling.task_rate_49 PARTITION OF taskling.task_rate FOR VALUES IN (49);
CREATE TABLE taskling.task_rate_50 PARTITION OF taskling.task_rate FOR VALUES IN (50);
CREATE TABLE taskling.task_rate_51 PARTITION OF taskling.task_rate FOR VALUES IN (51);
CREATE TABLE taskling.task_rate_52 PARTITION OF taskling.task_rate FOR VALUES IN (52);
CREATE TABLE taskling.task_rate_53 PARTITION OF taskling.task_rate FOR VALUES IN (53);
CREATE TABLE taskling.task_rate_54 PARTITION OF taskling.task_rate FOR VALUES IN (54);
CREATE TABLE taskling.task_rate_55 PARTITION OF taskling.task_rate FOR VALUES IN (55);
CREATE TABLE taskling.task_rate_56 PARTITION OF taskling.task_rate FOR VALUES IN (56);
CREATE TABLE taskling.task_rate_57 PARTITION OF taskling.task_rate FOR VALUES IN (57);
CREATE TABLE taskling.task_rate_58 PARTITION OF taskling.task_rate FOR VALUES IN (58);
CREATE TABLE taskling.task_rate_59 PARTITION OF taskling.task_rate FOR VALUES IN (59);
CREATE TABLE taskling.task_rate_60 PARTITION OF taskling.task_rate FOR VALUES IN (60);
CREATE TABLE taskling.task_rate_61 PARTITION OF taskling.task_rate FOR VALUES IN (61);
CREATE TABLE taskling.task_rate_62 PARTITION OF taskling.task_rate FOR VALUES IN (62);
CREATE TABLE taskling.task_rate_63 PARTITION OF taskling.task_rate FOR VALUES IN (63);

CREATE TABLE taskling.key_rate_00 PARTITION OF taskling.key_rate FOR VALUES IN (0);
CREATE TABLE taskling.key_rate_01 PARTITION OF taskling.key_rate FOR VALUES IN (1);
CREATE TABLE taskling.key_rate_02 PARTITION OF taskling.key_rate FOR VALUES IN (2);
CREATE TABLE taskling.key_rate_03 PARTITION OF taskling.key_rate FOR VALUES IN (3);
CREATE TABLE taskling.key_rate_04 PARTITION OF taskling.key_rate FOR VALUES IN (4);
CREATE TABLE taskling.key_rate_05 PARTITION OF taskling.key_rate FOR VALUES IN (5);
CREATE TABLE taskling.key_rate_06 PARTITION OF taskling.key_rate FOR VALUES IN (6);
CREATE TABLE taskling.key_rate_07 PARTITION OF taskling.key_rate FOR VALUES IN (7);
CREATE TABLE taskling.key_rate_08 PARTITION OF taskling.key_rate FOR VALUES IN (8);
CREATE TABLE taskling.key_rate_09 PARTITION OF taskling.key_rate FOR VALUES IN (9);
CREATE TABLE taskling.key_rate_10 PARTITION OF taskling.key_rate FOR VALUES IN (10);
CREATE TABLE taskling.key_rate_11 PARTITION OF taskling.key_rate FOR VALUES IN (11);
CREATE TABLE taskling.key_rate_12 PARTITION OF taskling.key_rate FOR VALUES IN (12);
CREATE TABLE taskling.key_rate_13 PARTITION OF taskling.key_rate FOR VALUES IN (13);
CREATE TABLE taskling.key_rate_14 PARTITION OF taskling.key_rate FOR VALUES IN (14);
CREATE TABLE taskling.key_rate_15 PARTITION OF taskling.key_rate FOR VALUES IN (15);
CREATE TABLE taskling.key_rate_16 PARTITION OF taskling.key_rate FOR VALUES IN (16);
CREATE TABLE taskling.key_rate_17 PARTITION OF taskling.key_rate FOR VALUES IN (17);
CREATE TABLE taskling.key_rate_18 PARTITION OF taskling.key_rate FOR VALUES IN (18);
CREATE TABLE taskling.key_rate_19 PARTITION OF taskling.key_rate FOR VALUES IN (19);
CREATE TABLE taskling.key_rate_20 PARTITION OF taskling.key_rate FOR VALUES IN (20);
CREATE TABLE taskling.key_rate_21 PARTITION OF taskling.key_rate FOR VALUES IN (21);
CREATE TABLE taskling.key_rate_22 PARTITION OF taskling.key_rate FOR VALUES IN (22);
CREATE TABLE taskling.key_rate_23 PARTITION OF taskling.key_rate FOR VALUES IN (23);
CREATE TABLE taskling.key_rate_24 PARTITION OF taskling.key_rate FOR VALUES IN (24);
CREATE TABLE taskling.key_rate_25 PARTITION OF taskling.key_rate FOR VALUES IN (25);
CREATE TABLE taskling.key_rate_26 PARTITION OF taskling.key_rate FOR VALUES IN (26);
CREATE TABLE taskling.key_rate_27 PARTITION OF taskling.key_rate FOR VALUES IN (27);
CREATE TABLE taskling.key_rate_28 PARTITION OF taskling.key_rate FOR VALUES IN (28);
CREATE TABLE taskling.key_rate_29 PARTITION OF taskling.key_rate FOR VALUES IN (29);
CREATE TABLE taskling.key_rate_30 PARTITION OF taskling.key_rate FOR VALUES IN (30);
CREATE TABLE taskling.key_rate_31 PARTITION OF taskling.key_rate FOR VALUES IN (31);
CREATE TABLE taskling.key_rate_32 PARTITION OF taskling.key_rate FOR VALUES IN (32);
CREATE TABLE taskling.key_rate_33 PARTITION OF taskling.key_rate FOR VALUES IN (33);
CREATE TABLE taskling.key_rate_34 PARTITION OF taskling.key_rate FOR VALUES IN (34);
CREATE TABLE taskling.key_rate_35 PARTITION OF taskling.key_rate FOR VALUES IN (35);
CREATE TABLE taskling.key_rate_36 PARTITION OF taskling.key_rate FOR VALUES IN (36);
CREATE TABLE taskling.key_rate_37 PARTITION OF taskling.key_rate FOR VALUES IN (37);
CREATE TABLE taskling.key_rate_38 PARTITION OF taskling.key_rate FOR VALUES IN (38);
CREATE TABLE taskling.key_rate_39 PARTITION OF taskling.key_rate FOR VALUES IN (39);
CREATE TABLE taskling.key_rate_40 PARTITION OF taskling.key_rate FOR VALUES IN (40);
CREATE TABLE taskling.key_rate_41 PARTITION OF taskling.key_rate FOR VALUES IN (41);
CREATE TABLE taskling.key_rate_42 PARTITION OF taskling.key_rate FOR VALUES IN (42);
CREATE TABLE taskling.key_rate_43 PARTITION OF taskling.key_rate FOR VALUES IN (43);
CREATE TABLE taskling.key_rate_44 PARTITION OF taskling.key_rate FOR VALUES IN (44);
CREATE TABLE taskling.key_rate_45 PARTITION OF taskling.key_rate FOR VALUES IN (45);
CREATE TABLE taskling.key_rate_46 PARTITION OF taskling.key_rate FOR VALUES IN (46);
CREATE TABLE taskling.key_rate_47 PARTITION OF taskling.key_rate FOR VALUES IN (47);
CREATE TABLE taskling.key_rate_48 PARTITION OF taskling.key_rate FOR VALUES IN (48);
CREATE TABLE taskling.key_rate_49 PARTITION OF taskling.key_rate FOR VALUES IN (49);
CREATE TABLE taskling.key_rate_50 PARTITION OF taskling.key_rate FOR VALUES IN (50);
CREATE TABLE taskling.key_rate_51 PARTITION OF taskling.key_rate FOR VALUES IN (51);
CREATE TABLE taskling.key_rate_52 PARTITION OF taskling.key_rate FOR VALUES IN (52);
CREATE TABLE taskling.key_rate_53 PARTITION OF taskling.key_rate FOR VALUES IN (53);
CREATE TABLE taskling.key_rate_54 PARTITION OF taskling.key_rate FOR VALUES IN (54);
CREATE TABLE taskling.key_rate_55 PARTITION OF taskling.key_rate FOR VALUES IN (55);
CREATE TABLE taskling.key_rate_56 PARTITION OF taskling.key_rate FOR VALUES IN (56);
CREATE TABLE taskling.key_rate_57 PARTITION OF taskling.key_rate FOR VALUES IN (57);
CREATE TABLE taskling.key_rate_58 PARTITION OF taskling.key_rate FOR VALUES IN (58);
CREATE TABLE taskling.key_rate_59 PARTITION OF taskling.key_rate FOR VALUES IN (59);
CREATE TABLE taskling.key_rate_60 PARTITION OF taskling.key_rate FOR VALUES IN (60);
CREATE TABLE taskling.key_rate_61 PARTITION OF taskling.key_rate FOR VALUES IN (61);
CREATE TABLE taskling.key_rate_62 PARTITION OF taskling.key_rate FOR VALUES IN (62);
CREATE TABLE taskling.key_rate_63 PARTITION OF taskling.key_rate FOR VALUES IN (63);

-- Executions denied by a rate say so in their blocked reason; the audit trail records rate
-- overrides as fields rate, key_rate and key_rate[KEY] (no schema change).

UPDATE taskling.protocol SET version = 7, changed_at = clock_timestamp();
