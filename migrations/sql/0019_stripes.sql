-- Grant protocol 5: token transactions of one task wait for each other before their snapshot.
--
-- A token transaction locks its tasks' rows; under SERIALIZABLE, one that waited for that lock
-- took its snapshot before the holder committed, so it failed with a serialization error when
-- the holder did (and was retried: a retry storm on a busy task). Now every token transaction
-- first takes, at both isolation levels, the lock of its tasks' stripes: one of these 64 empty
-- tables per task (its id modulo 64), IN EXCLUSIVE MODE, in stripe order (so that two
-- transactions of several tasks cannot deadlock). LOCK TABLE is a utility statement: it takes no
-- snapshot, so a transaction's snapshot is taken once it holds its stripes, after the previous
-- transaction of its tasks committed. The locks are transaction-scoped: PgBouncer's transaction
-- pooling keeps working. Binaries of protocol 4 take no stripe, so they refuse to grant from
-- now on (ErrUpgradeRequired), as with every protocol bump; they still heartbeat and complete.

CREATE TABLE taskling.stripe_00 ();
CREATE TABLE taskling.stripe_01 ();
CREATE TABLE taskling.stripe_02 ();
CREATE TABLE taskling.stripe_03 ();
CREATE TABLE taskling.stripe_04 ();
CREATE TABLE taskling.stripe_05 ();
CREATE TABLE taskling.stripe_06 ();
CREATE TABLE taskling.stripe_07 ();
CREATE TABLE taskling.stripe_08 ();
CREATE TABLE taskling.stripe_09 ();
CREATE TABLE taskling.stripe_10 ();
CREATE TABLE taskling.stripe_11 ();
CREATE TABLE taskling.stripe_12 ();
CREATE TABLE taskling.stripe_13 ();
CREATE TABLE taskling.stripe_14 ();
CREATE TABLE taskling.stripe_15 ();
CREATE TABLE taskling.stripe_16 ();
CREATE TABLE taskling.stripe_17 ();
CREATE TABLE taskling.stripe_18 ();
CREATE TABLE taskling.stripe_19 ();
CREATE TABLE taskling.stripe_20 ();
CREATE TABLE taskling.stripe_21 ();
CREATE TABLE taskling.stripe_22 ();
CREATE TABLE taskling.stripe_23 ();
CREATE TABLE taskling.stripe_24 ();
CREATE TABLE taskling.stripe_25 ();
CREATE TABLE taskling.stripe_26 ();
CREATE TABLE taskling.stripe_27 ();
CREATE TABLE taskling.stripe_28 ();
CREATE TABLE taskling.stripe_29 ();
CREATE TABLE taskling.stripe_30 ();
CREATE TABLE taskling.stripe_31 ();
CREATE TABLE taskling.stripe_32 ();
CREATE TABLE taskling.stripe_33 ();
CREATE TABLE taskling.stripe_34 ();
CREATE TABLE taskling.stripe_35 ();
CREATE TABLE taskling.stripe_36 ();
CREATE TABLE taskling.stripe_37 ();
CREATE TABLE taskling.stripe_38 ();
CREATE TABLE taskling.stripe_39 ();
CREATE TABLE taskling.stripe_40 ();
CREATE TABLE taskling.stripe_41 ();
CREATE TABLE taskling.stripe_42 ();
CREATE TABLE taskling.stripe_43 ();
CREATE TABLE taskling.stripe_44 ();
CREATE TABLE taskling.stripe_45 ();
CREATE TABLE taskling.stripe_46 ();
CREATE TABLE taskling.stripe_47 ();
CREATE TABLE taskling.stripe_48 ();
CREATE TABLE taskling.stripe_49 ();
CREATE TABLE taskling.stripe_50 ();
CREATE TABLE taskling.stripe_51 ();
CREATE TABLE taskling.stripe_52 ();
CREATE TABLE taskling.stripe_53 ();
CREATE TABLE taskling.stripe_54 ();
CREATE TABLE taskling.stripe_55 ();
CREATE TABLE taskling.stripe_56 ();
CREATE TABLE taskling.stripe_57 ();
CREATE TABLE taskling.stripe_58 ();
CREATE TABLE taskling.stripe_59 ();
CREATE TABLE taskling.stripe_60 ();
CREATE TABLE taskling.stripe_61 ();
CREATE TABLE taskling.stripe_62 ();
CREATE TABLE taskling.stripe_63 ();

UPDATE taskling.protocol SET version = 5, changed_at = clock_timestamp();
