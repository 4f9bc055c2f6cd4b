-- Herald's schema, as migrations: each "-- migration: N" applies once, in order, in a
-- transaction of its own (HeraldStore.migrate). The statements are written for SQLite;
-- PostgreSQL gets BIGINT for INTEGER and identity columns for AUTOINCREMENT (translate).
-- A statement ends at a line holding only ";". Comment lines between statements document
-- them; a statement that begins "-- PostgreSQL only" or "-- SQLite only" runs on that
-- database alone. Never edit a migration that has shipped: add one.

-- migration: 1
CREATE TABLE devices (
    app_id TEXT NOT NULL,
    device_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    platform TEXT NOT NULL,
    token TEXT NOT NULL,
    environment TEXT NOT NULL,
    name TEXT, model TEXT, locale TEXT, time_zone TEXT, app_version TEXT, authorization_status TEXT,
    active INTEGER NOT NULL DEFAULT 1,
    inactive_reason TEXT,
    inactive_since BIGINT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (app_id, device_id)
)
;
CREATE UNIQUE INDEX devices_token ON devices (app_id, platform, token)
;
CREATE INDEX devices_user ON devices (app_id, user_id)
;
CREATE TABLE notifications (
    id TEXT PRIMARY KEY,
    app_id TEXT NOT NULL,
    idempotency_key TEXT,
    content TEXT NOT NULL,
    recipients INTEGER NOT NULL DEFAULT 0,
    created_at BIGINT NOT NULL
)
;
CREATE UNIQUE INDEX notifications_idempotency ON notifications (app_id, idempotency_key)
;
CREATE TABLE deliveries (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    notification_id TEXT NOT NULL,
    app_id TEXT NOT NULL,
    device_id TEXT NOT NULL,
    status TEXT NOT NULL,
    due_at BIGINT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    reason TEXT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
)
;
CREATE INDEX deliveries_due ON deliveries (status, due_at)
;
CREATE INDEX deliveries_notification ON deliveries (notification_id)
;
CREATE TABLE counters (
    name TEXT PRIMARY KEY,
    value BIGINT NOT NULL
)
;

-- migration: 2
-- Per-notification counters, kept in the same transactions as the deliveries, so
-- status reads are O(1) however many recipients a notification has.
ALTER TABLE notifications ADD COLUMN sent_count INTEGER NOT NULL DEFAULT 0
;
ALTER TABLE notifications ADD COLUMN failed_count INTEGER NOT NULL DEFAULT 0
;
ALTER TABLE notifications ADD COLUMN deferred_count INTEGER NOT NULL DEFAULT 0
;
ALTER TABLE notifications ADD COLUMN suppressed_count INTEGER NOT NULL DEFAULT 0
;

-- migration: 3
CREATE TABLE users (
    app_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    time_zone TEXT,
    locale TEXT,
    attributes TEXT NOT NULL DEFAULT '{}',
    preferences TEXT NOT NULL DEFAULT '{}',
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (app_id, user_id)
)
;

-- migration: 4
-- The policy engine's decision trace per delivery (JSON array of steps), and what
-- each user received when: pacing and grouping look at the last hour of it.
ALTER TABLE deliveries ADD COLUMN trace TEXT
;
CREATE TABLE user_sends (
    app_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    notification_id TEXT NOT NULL,
    sent_at BIGINT NOT NULL,
    PRIMARY KEY (app_id, user_id, notification_id)
)
;
CREATE INDEX user_sends_recent ON user_sends (app_id, user_id, sent_at)
;

-- migration: 5
-- The outbox index holds only rows still to be answered: a delivery leaves it when it
-- is sent, failed or suppressed, so the index stays the size of the queue, not of
-- the history (queries must name statuses as literals to use it).
DROP INDEX deliveries_due
;
CREATE INDEX deliveries_due ON deliveries (status, due_at) WHERE status IN ('queued', 'deferred', 'sending')
;

-- migration: 6
-- One row /healthz writes: proof that the database takes writes.
CREATE TABLE heartbeat (id INTEGER PRIMARY KEY CHECK (id = 1), at BIGINT NOT NULL)
;

-- migration: 7
-- The user a delivery was planned for (a device that changed hands is
-- not sent another user's notification), and owned, fenced claims: the node that
-- claimed a row and the claim's number, which every result write must match.
-- Every process with an outbox loop, and when it last said it was alive.
ALTER TABLE deliveries ADD COLUMN user_id TEXT
;
ALTER TABLE deliveries ADD COLUMN claimed_by TEXT
;
ALTER TABLE deliveries ADD COLUMN claim INTEGER NOT NULL DEFAULT 0
;
CREATE TABLE nodes (id TEXT PRIMARY KEY, started_at BIGINT NOT NULL, heartbeat_at BIGINT NOT NULL)
;

-- migration: 8
-- PostgreSQL: identifiers compare byte by byte (`COLLATE "C"`, what SQLite does), not
-- by the database's locale: ids and tokens have no linguistic order, and strcoll was a
-- fifth of PostgreSQL's CPU in a device import (every index probe compares tokens).
-- Rebuilds the indexes on these columns.
-- PostgreSQL only
ALTER TABLE devices ALTER COLUMN app_id TYPE TEXT COLLATE "C", ALTER COLUMN device_id TYPE TEXT COLLATE "C", ALTER COLUMN user_id TYPE TEXT COLLATE "C", ALTER COLUMN platform TYPE TEXT COLLATE "C", ALTER COLUMN token TYPE TEXT COLLATE "C"
;
-- PostgreSQL only
ALTER TABLE notifications ALTER COLUMN id TYPE TEXT COLLATE "C", ALTER COLUMN app_id TYPE TEXT COLLATE "C", ALTER COLUMN idempotency_key TYPE TEXT COLLATE "C"
;
-- PostgreSQL only
ALTER TABLE deliveries ALTER COLUMN notification_id TYPE TEXT COLLATE "C", ALTER COLUMN app_id TYPE TEXT COLLATE "C", ALTER COLUMN device_id TYPE TEXT COLLATE "C", ALTER COLUMN status TYPE TEXT COLLATE "C"
;
-- PostgreSQL only
ALTER TABLE users ALTER COLUMN app_id TYPE TEXT COLLATE "C", ALTER COLUMN user_id TYPE TEXT COLLATE "C"
;
-- PostgreSQL only
ALTER TABLE user_sends ALTER COLUMN app_id TYPE TEXT COLLATE "C", ALTER COLUMN user_id TYPE TEXT COLLATE "C", ALTER COLUMN notification_id TYPE TEXT COLLATE "C"
;

-- migration: 9
-- Fairness: each delivery's lane (0 urgent: a transactional type or priority
-- 10 asked for; 1 normal), and the outbox index by status, app and lane, so a claim
-- takes urgent rows first and shares itself between apps (one range per app and lane).
-- On PostgreSQL the index ends with the id, so a claim's `ORDER BY due_at, id` walks
-- it in order: without it every claim read and sorted all due rows of its status (a
-- fan-out's million rows share one due_at; the 1M fan-out took 50 s, each claim slower
-- than the last). SQLite's index ends with the rowid (the id) already.
ALTER TABLE deliveries ADD COLUMN lane INTEGER NOT NULL DEFAULT 1
;
DROP INDEX deliveries_due
;
-- SQLite only
CREATE INDEX deliveries_due ON deliveries (status, app_id, lane, due_at) WHERE status IN ('queued', 'deferred', 'sending')
;
-- PostgreSQL only
CREATE INDEX deliveries_due ON deliveries (status, app_id, lane, due_at, id) WHERE status IN ('queued', 'deferred', 'sending')
;

-- migration: 10
-- Broadcasts: a notification to all of an app's devices is a cursor over
-- its devices, not a million rows written at acceptance. Pages of devices are handed
-- out under a claim (the fence), and each device's row is written once, with its
-- result. A page whose node died is handed out again, without the devices that have
-- their row (hence the deliveries index by notification and device).
-- A broadcast counts its recipients from two indexes: the app's devices (by
-- user) less its inactive ones (this partial index: only inactive devices).
-- A page's row ids are a block reserved when it is first handed out, kept if it
-- is handed out again: on SQLite from the AUTOINCREMENT counter (which must
-- exist), on PostgreSQL blocks of 4,096 from 2^50 up (the identity sequence
-- cannot hand out a contiguous range; it would need 2^50 rows to reach them).
CREATE TABLE broadcasts (
    notification_id TEXT PRIMARY KEY,
    app_id TEXT NOT NULL,
    lane INTEGER NOT NULL,
    due_at BIGINT NOT NULL,
    accepted_at BIGINT NOT NULL,
    expected INTEGER NOT NULL,
    cursor TEXT NOT NULL DEFAULT '',
    handed INTEGER NOT NULL DEFAULT 0
)
;
CREATE INDEX broadcasts_due ON broadcasts (due_at)
;
CREATE TABLE broadcast_pages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    notification_id TEXT NOT NULL,
    app_id TEXT NOT NULL,
    lane INTEGER NOT NULL,
    due_at BIGINT NOT NULL,
    accepted_at BIGINT NOT NULL,
    after_device TEXT NOT NULL,
    through_device TEXT NOT NULL,
    first_id BIGINT NOT NULL,
    size INTEGER NOT NULL,
    remaining INTEGER NOT NULL,
    claimed_by TEXT,
    claim INTEGER NOT NULL DEFAULT 1
)
;
-- PostgreSQL only
ALTER TABLE broadcasts ALTER COLUMN notification_id TYPE TEXT COLLATE "C", ALTER COLUMN app_id TYPE TEXT COLLATE "C", ALTER COLUMN cursor TYPE TEXT COLLATE "C"
;
-- PostgreSQL only
ALTER TABLE broadcast_pages ALTER COLUMN notification_id TYPE TEXT COLLATE "C", ALTER COLUMN app_id TYPE TEXT COLLATE "C", ALTER COLUMN after_device TYPE TEXT COLLATE "C", ALTER COLUMN through_device TYPE TEXT COLLATE "C"
;
CREATE INDEX devices_inactive ON devices (app_id) WHERE active = 0
;
DROP INDEX deliveries_notification
;
CREATE INDEX deliveries_notification ON deliveries (notification_id, device_id)
;
-- PostgreSQL only
CREATE SEQUENCE broadcast_blocks
;
-- SQLite only
INSERT INTO sqlite_sequence (name, seq) SELECT 'deliveries', COALESCE((SELECT MAX(id) FROM deliveries), 0) WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'deliveries')
;

-- migration: 11
-- PostgreSQL: deliveries partitioned by day of creation (UTC), so retention drops a
-- day's partition whole instead of deleting its rows one by one (no dead tuples, no
-- vacuum debt). The key becomes (id, created_at): a partitioned table's unique keys
-- must hold the partition key; ids still come from one sequence. A DEFAULT partition
-- takes rows of days with no partition of their own (none, while the upkeep creates
-- days ahead: `maintainPartitions`). Existing rows are copied into one partition per
-- day they were created on. SQLite has nothing to drop partitions from.
-- PostgreSQL only
DROP INDEX deliveries_due
;
-- PostgreSQL only
DROP INDEX deliveries_notification
;
-- PostgreSQL only
ALTER TABLE deliveries RENAME TO deliveries_unpartitioned
;
-- PostgreSQL only
CREATE TABLE deliveries (LIKE deliveries_unpartitioned INCLUDING DEFAULTS INCLUDING IDENTITY, PRIMARY KEY (id, created_at))
PARTITION BY RANGE (created_at)
;
-- PostgreSQL only
CREATE TABLE deliveries_default PARTITION OF deliveries DEFAULT
;
-- PostgreSQL only
DO $$
DECLARE day BIGINT;
BEGIN
    FOR day IN SELECT DISTINCT created_at / 86400000 FROM deliveries_unpartitioned LOOP
        EXECUTE format('CREATE TABLE %I PARTITION OF deliveries FOR VALUES FROM (%s) TO (%s)',
            'deliveries_' || to_char(to_timestamp(day * 86400) AT TIME ZONE 'UTC', 'YYYYMMDD'), day * 86400000, (day + 1) * 86400000);
    END LOOP;
END $$
;
-- PostgreSQL only
INSERT INTO deliveries SELECT * FROM deliveries_unpartitioned
;
-- PostgreSQL only
SELECT setval(pg_get_serial_sequence('deliveries', 'id'), GREATEST(1, (SELECT COALESCE(MAX(id), 0) FROM deliveries WHERE id < 1125899906842624)))
;
-- PostgreSQL only
DROP TABLE deliveries_unpartitioned
;
-- PostgreSQL only
CREATE INDEX deliveries_due ON deliveries (status, app_id, lane, due_at, id) WHERE status IN ('queued', 'deferred', 'sending')
;
-- PostgreSQL only
CREATE INDEX deliveries_notification ON deliveries (notification_id, device_id)
;

-- migration: 12
-- Cancellation: a notification's cancel key (found by app and key), how
-- many of its deliveries were cancelled, and a broadcast page cancelled while a node
-- held it (its devices without an answer end cancelled, and it is never handed out
-- again).
-- SQLite only
ALTER TABLE notifications ADD COLUMN cancel_key TEXT
;
-- PostgreSQL only
ALTER TABLE notifications ADD COLUMN cancel_key TEXT COLLATE "C"
;
ALTER TABLE notifications ADD COLUMN cancelled_count INTEGER NOT NULL DEFAULT 0
;
CREATE INDEX notifications_cancel_key ON notifications (app_id, cancel_key) WHERE cancel_key IS NOT NULL
;
ALTER TABLE broadcast_pages ADD COLUMN cancelled INTEGER NOT NULL DEFAULT 0
;

-- migration: 13
-- Time and events: enrolments in lifecycle tracks; timers, what fires later
-- (a track's step, a silent sync) as a row with a due time, claimed and fenced like a
-- delivery (pending → firing → fired, skipped, cancelled or failed); events users did
-- (what a step's `unless` and triggers read); badge counters; job occurrences.
-- Badges: each user's counters; the badge is their sum.
-- Jobs: each user gets each occurrence of a job at most once (the key), and
-- each (job, zone, local day) is run once.
CREATE TABLE enrolments (
    app_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    track TEXT NOT NULL,
    anchor_at BIGINT NOT NULL,
    data TEXT NOT NULL DEFAULT '{}',
    test_seconds INTEGER,
    enrolled_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (app_id, user_id, track)
)
;
CREATE TABLE timers (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    app_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    name TEXT NOT NULL,
    step TEXT NOT NULL,
    due_at BIGINT NOT NULL,
    status TEXT NOT NULL,
    cancel_key TEXT,
    data TEXT,
    trace TEXT,
    reason TEXT,
    notification_id TEXT,
    claimed_by TEXT,
    claim BIGINT NOT NULL DEFAULT 0,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
)
;
CREATE INDEX timers_due ON timers (status, due_at) WHERE status IN ('pending', 'firing')
;
CREATE INDEX timers_user ON timers (app_id, user_id, kind, name)
;
CREATE INDEX timers_cancel_key ON timers (app_id, cancel_key) WHERE status IN ('pending', 'firing')
;
CREATE TABLE events (
    id TEXT PRIMARY KEY,
    app_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    name TEXT NOT NULL,
    data TEXT NOT NULL DEFAULT '{}',
    occurred_at BIGINT NOT NULL,
    received_at BIGINT NOT NULL,
    idempotency_key TEXT,
    notifications TEXT
)
;
CREATE INDEX events_user ON events (app_id, user_id, name, occurred_at)
;
CREATE UNIQUE INDEX events_idempotency ON events (app_id, idempotency_key)
;
CREATE INDEX events_received ON events (received_at)
;
CREATE TABLE badges (
    app_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    counter TEXT NOT NULL,
    value BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (app_id, user_id, counter)
)
;
CREATE TABLE job_occurrences (
    app_id TEXT NOT NULL,
    job TEXT NOT NULL,
    user_id TEXT NOT NULL,
    occurrence TEXT NOT NULL,
    notification_id TEXT,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (app_id, job, user_id, occurrence)
)
;
CREATE TABLE job_runs (
    app_id TEXT NOT NULL,
    job TEXT NOT NULL,
    zone TEXT NOT NULL,
    occurrence TEXT NOT NULL,
    status TEXT NOT NULL,
    claimed_by TEXT,
    users INTEGER NOT NULL DEFAULT 0,
    sent INTEGER NOT NULL DEFAULT 0,
    started_at BIGINT NOT NULL,
    finished_at BIGINT,
    PRIMARY KEY (app_id, job, zone, occurrence)
)
;
CREATE INDEX users_zone ON users (app_id, time_zone)
;
-- PostgreSQL only
ALTER TABLE enrolments ALTER COLUMN app_id TYPE TEXT COLLATE "C", ALTER COLUMN user_id TYPE TEXT COLLATE "C", ALTER COLUMN track TYPE TEXT COLLATE "C"
;
-- PostgreSQL only
ALTER TABLE timers ALTER COLUMN app_id TYPE TEXT COLLATE "C", ALTER COLUMN user_id TYPE TEXT COLLATE "C", ALTER COLUMN kind TYPE TEXT COLLATE "C", ALTER COLUMN name TYPE TEXT COLLATE "C", ALTER COLUMN step TYPE TEXT COLLATE "C", ALTER COLUMN status TYPE TEXT COLLATE "C", ALTER COLUMN cancel_key TYPE TEXT COLLATE "C"
;
-- PostgreSQL only
ALTER TABLE events ALTER COLUMN id TYPE TEXT COLLATE "C", ALTER COLUMN app_id TYPE TEXT COLLATE "C", ALTER COLUMN user_id TYPE TEXT COLLATE "C", ALTER COLUMN name TYPE TEXT COLLATE "C", ALTER COLUMN idempotency_key TYPE TEXT COLLATE "C"
;
-- PostgreSQL only
ALTER TABLE badges ALTER COLUMN app_id TYPE TEXT COLLATE "C", ALTER COLUMN user_id TYPE TEXT COLLATE "C", ALTER COLUMN counter TYPE TEXT COLLATE "C"
;
-- PostgreSQL only
ALTER TABLE job_occurrences ALTER COLUMN app_id TYPE TEXT COLLATE "C", ALTER COLUMN job TYPE TEXT COLLATE "C", ALTER COLUMN user_id TYPE TEXT COLLATE "C", ALTER COLUMN occurrence TYPE TEXT COLLATE "C"
;
-- PostgreSQL only
ALTER TABLE job_runs ALTER COLUMN app_id TYPE TEXT COLLATE "C", ALTER COLUMN job TYPE TEXT COLLATE "C", ALTER COLUMN zone TYPE TEXT COLLATE "C", ALTER COLUMN occurrence TYPE TEXT COLLATE "C"
;

-- migration: 14
-- The key's index no longer names the status, so a step that fires does not touch it
-- (a cancel by key tests the status on the rows it finds; one for some users finds them
-- by user, `timers_user`). New steps still append to it, in id order.
DROP INDEX timers_cancel_key
;
CREATE INDEX timers_cancel_key ON timers (app_id, cancel_key) WHERE cancel_key IS NOT NULL
;

-- migration: 15
-- A fired step's page (`HeraldStore+StepPages`): its devices listed in the page (a JSON
-- array of [device, user] in row-id order) instead of a range of the app's devices, and
-- the users cancelled while it was handed out (a JSON array), whose devices are never
-- tried again, and the decision trace its deliveries start with.
ALTER TABLE broadcast_pages ADD COLUMN devices TEXT
;
ALTER TABLE broadcast_pages ADD COLUMN cancelled_users TEXT
;
ALTER TABLE broadcast_pages ADD COLUMN trace TEXT
;

-- migration: 16
-- The engagement loop: each notification's catalog type and the day
-- (UTC, days since 1970) it was sent, or scheduled for, which is its analytics cohort;
-- its deliveries' opens (one per delivery, however often reported); per (type, day) the
-- counters the analytics read, kept by a trigger from the notifications' counters, so
-- every path that counts a delivery counts it there too, in the same transaction.
-- SQLite: a row trigger on the counters.
-- PostgreSQL: once per statement, the changes summed per (type, day) and written in
-- key order, so two nodes' result transactions take the rows in the same order.
-- SQLite only
ALTER TABLE notifications ADD COLUMN type TEXT
;
-- PostgreSQL only
ALTER TABLE notifications ADD COLUMN type TEXT COLLATE "C"
;
ALTER TABLE notifications ADD COLUMN day INTEGER
;
ALTER TABLE notifications ADD COLUMN opened_count INTEGER NOT NULL DEFAULT 0
;
CREATE TABLE type_stats (
    app_id TEXT NOT NULL,
    type TEXT NOT NULL,
    day INTEGER NOT NULL,
    sent INTEGER NOT NULL DEFAULT 0,
    failed INTEGER NOT NULL DEFAULT 0,
    deferred INTEGER NOT NULL DEFAULT 0,
    suppressed INTEGER NOT NULL DEFAULT 0,
    cancelled INTEGER NOT NULL DEFAULT 0,
    opened INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (app_id, type, day)
)
;
-- PostgreSQL only
ALTER TABLE type_stats ALTER COLUMN app_id TYPE TEXT COLLATE "C", ALTER COLUMN type TYPE TEXT COLLATE "C"
;
CREATE TABLE opens (
    app_id TEXT NOT NULL,
    delivery_id INTEGER NOT NULL,
    notification_id TEXT NOT NULL,
    device_id TEXT NOT NULL,
    user_id TEXT,
    action TEXT NOT NULL,
    opened_at BIGINT NOT NULL,
    received_at BIGINT NOT NULL,
    reports INTEGER NOT NULL DEFAULT 1,
    PRIMARY KEY (app_id, delivery_id)
)
;
-- PostgreSQL only
ALTER TABLE opens ALTER COLUMN app_id TYPE TEXT COLLATE "C"
;
CREATE INDEX opens_received ON opens (received_at)
;
-- SQLite only
CREATE TRIGGER notifications_type_stats
AFTER UPDATE OF sent_count, failed_count, deferred_count, suppressed_count, cancelled_count, opened_count ON notifications
WHEN NEW.type IS NOT NULL AND NEW.day IS NOT NULL
BEGIN
    INSERT INTO type_stats (app_id, type, day, sent, failed, deferred, suppressed, cancelled, opened)
    VALUES (NEW.app_id, NEW.type, NEW.day, NEW.sent_count - OLD.sent_count, NEW.failed_count - OLD.failed_count,
        NEW.deferred_count - OLD.deferred_count, NEW.suppressed_count - OLD.suppressed_count,
        NEW.cancelled_count - OLD.cancelled_count, NEW.opened_count - OLD.opened_count)
    ON CONFLICT (app_id, type, day) DO UPDATE SET sent = sent + excluded.sent, failed = failed + excluded.failed,
        deferred = deferred + excluded.deferred, suppressed = suppressed + excluded.suppressed,
        cancelled = cancelled + excluded.cancelled, opened = opened + excluded.opened;
END
;
-- PostgreSQL only
CREATE FUNCTION herald_type_stats() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO type_stats AS s (app_id, type, day, sent, failed, deferred, suppressed, cancelled, opened)
    SELECT n.app_id, n.type, n.day, sum(n.sent_count - o.sent_count), sum(n.failed_count - o.failed_count),
        sum(n.deferred_count - o.deferred_count), sum(n.suppressed_count - o.suppressed_count),
        sum(n.cancelled_count - o.cancelled_count), sum(n.opened_count - o.opened_count)
    FROM changed_new n JOIN changed_old o ON o.id = n.id
    WHERE n.type IS NOT NULL AND n.day IS NOT NULL
        AND (n.sent_count, n.failed_count, n.deferred_count, n.suppressed_count, n.cancelled_count, n.opened_count)
            IS DISTINCT FROM (o.sent_count, o.failed_count, o.deferred_count, o.suppressed_count, o.cancelled_count, o.opened_count)
    GROUP BY n.app_id, n.type, n.day
    ORDER BY n.app_id, n.type, n.day
    ON CONFLICT (app_id, type, day) DO UPDATE SET sent = s.sent + excluded.sent, failed = s.failed + excluded.failed,
        deferred = s.deferred + excluded.deferred, suppressed = s.suppressed + excluded.suppressed,
        cancelled = s.cancelled + excluded.cancelled, opened = s.opened + excluded.opened;
    RETURN NULL;
END
$$
;
-- PostgreSQL only
CREATE TRIGGER notifications_type_stats AFTER UPDATE ON notifications
REFERENCING OLD TABLE AS changed_old NEW TABLE AS changed_new
FOR EACH STATEMENT EXECUTE FUNCTION herald_type_stats()
;

-- migration: 17
-- Quick actions and webhooks: keys Herald makes for an app (the action
-- tokens' key, shared by every node); each delivery's commit (one per delivery: a replay
-- answers the first), its audit row; webhook messages not yet delivered, retried on a
-- schedule, in order per user.
-- Resolved elsewhere: the first resolution of a notification for a user.
-- Responses to a notification (Lucid's respond endpoint).
-- The opt-in rate (analytics) counts devices by these: an index scan, not a read of
-- every device row (100k devices: 450 ms → 20 ms). Devices without a permission
-- (most imports) are not in it.
CREATE TABLE app_secrets (
    app_id TEXT NOT NULL,
    purpose TEXT NOT NULL,
    secret TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (app_id, purpose)
)
;
CREATE TABLE action_commits (
    app_id TEXT NOT NULL,
    delivery_id INTEGER NOT NULL,
    action TEXT NOT NULL,
    notification_id TEXT NOT NULL,
    device_id TEXT NOT NULL,
    user_id TEXT,
    turn_id TEXT,
    text TEXT,
    status TEXT NOT NULL,
    result TEXT,
    latency_ms INTEGER,
    message_id TEXT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (app_id, delivery_id)
)
;
CREATE INDEX action_commits_user ON action_commits (app_id, user_id, created_at)
;
CREATE INDEX action_commits_created ON action_commits (app_id, created_at)
;
CREATE TABLE webhook_messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id TEXT NOT NULL,
    app_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    event TEXT NOT NULL,
    idempotency_key TEXT,
    body TEXT NOT NULL,
    status TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    next_at BIGINT NOT NULL,
    last_status INTEGER,
    last_error TEXT,
    claimed_by TEXT,
    claimed_until BIGINT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
)
;
CREATE INDEX webhook_messages_due ON webhook_messages (next_at) WHERE status = 'pending'
;
CREATE INDEX webhook_messages_user ON webhook_messages (app_id, user_id, id) WHERE status = 'pending'
;
CREATE INDEX webhook_messages_created ON webhook_messages (app_id, created_at)
;
CREATE TABLE resolutions (
    app_id TEXT NOT NULL,
    notification_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    device_id TEXT NOT NULL,
    label TEXT NOT NULL,
    replacement_id TEXT,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (app_id, notification_id, user_id)
)
;
CREATE TABLE responses (
    id TEXT PRIMARY KEY,
    app_id TEXT NOT NULL,
    notification_id TEXT NOT NULL,
    user_id TEXT,
    device_id TEXT NOT NULL,
    text TEXT,
    energy INTEGER,
    mood INTEGER,
    focus INTEGER,
    created_at BIGINT NOT NULL
)
;
CREATE INDEX responses_notification ON responses (app_id, notification_id, created_at)
;
CREATE INDEX devices_permission ON devices (app_id, platform, app_version, authorization_status)
WHERE active = 1 AND authorization_status IS NOT NULL
;
-- PostgreSQL only
ALTER TABLE app_secrets ALTER COLUMN app_id TYPE TEXT COLLATE "C", ALTER COLUMN purpose TYPE TEXT COLLATE "C"
;
-- PostgreSQL only
ALTER TABLE action_commits ALTER COLUMN app_id TYPE TEXT COLLATE "C", ALTER COLUMN user_id TYPE TEXT COLLATE "C"
;
-- PostgreSQL only
ALTER TABLE webhook_messages ALTER COLUMN app_id TYPE TEXT COLLATE "C", ALTER COLUMN user_id TYPE TEXT COLLATE "C"
;
-- PostgreSQL only
ALTER TABLE resolutions ALTER COLUMN app_id TYPE TEXT COLLATE "C", ALTER COLUMN user_id TYPE TEXT COLLATE "C"
;

-- migration: 18
-- The opt-in rate's counts, kept by triggers on devices as the type
-- counters are on notifications: the analytics read a row per (platform, app version,
-- permission), not the devices (1M devices: 247 ms through the covering index it replaces).
-- SQLite: row triggers; a device counts while active with a permission reported.
-- PostgreSQL: once per statement, the changes summed per key and written in key
-- order (a statement that changes no counted value writes nothing).
CREATE TABLE permission_stats (
    app_id TEXT NOT NULL,
    platform TEXT NOT NULL,
    app_version TEXT NOT NULL,
    permission TEXT NOT NULL,
    devices INTEGER NOT NULL,
    PRIMARY KEY (app_id, platform, app_version, permission)
)
;
-- PostgreSQL only
ALTER TABLE permission_stats ALTER COLUMN app_id TYPE TEXT COLLATE "C", ALTER COLUMN platform TYPE TEXT COLLATE "C",
    ALTER COLUMN app_version TYPE TEXT COLLATE "C", ALTER COLUMN permission TYPE TEXT COLLATE "C"
;
INSERT INTO permission_stats (app_id, platform, app_version, permission, devices)
SELECT app_id, platform, COALESCE(app_version, ''), authorization_status, count(*) FROM devices
WHERE active = 1 AND authorization_status IS NOT NULL GROUP BY app_id, platform, COALESCE(app_version, ''), authorization_status
;
DROP INDEX devices_permission
;
-- SQLite only
CREATE TRIGGER devices_permission_insert AFTER INSERT ON devices
WHEN NEW.active = 1 AND NEW.authorization_status IS NOT NULL
BEGIN
    INSERT INTO permission_stats (app_id, platform, app_version, permission, devices)
    VALUES (NEW.app_id, NEW.platform, COALESCE(NEW.app_version, ''), NEW.authorization_status, 1)
    ON CONFLICT (app_id, platform, app_version, permission) DO UPDATE SET devices = devices + 1;
END
;
-- SQLite only
CREATE TRIGGER devices_permission_delete AFTER DELETE ON devices
WHEN OLD.active = 1 AND OLD.authorization_status IS NOT NULL
BEGIN
    UPDATE permission_stats SET devices = devices - 1 WHERE app_id = OLD.app_id AND platform = OLD.platform
        AND app_version = COALESCE(OLD.app_version, '') AND permission = OLD.authorization_status;
END
;
-- SQLite only
CREATE TRIGGER devices_permission_update AFTER UPDATE OF app_id, platform, app_version, authorization_status, active ON devices
WHEN ((OLD.active = 1 AND OLD.authorization_status IS NOT NULL) OR (NEW.active = 1 AND NEW.authorization_status IS NOT NULL))
    AND (OLD.app_id IS NOT NEW.app_id OR OLD.platform IS NOT NEW.platform OR OLD.app_version IS NOT NEW.app_version
        OR OLD.authorization_status IS NOT NEW.authorization_status OR OLD.active IS NOT NEW.active)
BEGIN
    UPDATE permission_stats SET devices = devices - 1 WHERE OLD.active = 1 AND OLD.authorization_status IS NOT NULL
        AND app_id = OLD.app_id AND platform = OLD.platform AND app_version = COALESCE(OLD.app_version, '')
        AND permission = OLD.authorization_status;
    INSERT INTO permission_stats (app_id, platform, app_version, permission, devices)
    SELECT NEW.app_id, NEW.platform, COALESCE(NEW.app_version, ''), NEW.authorization_status, 1
    WHERE NEW.active = 1 AND NEW.authorization_status IS NOT NULL
    ON CONFLICT (app_id, platform, app_version, permission) DO UPDATE SET devices = devices + 1;
END
;
-- PostgreSQL only
CREATE FUNCTION herald_permission_stats() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO permission_stats AS s (app_id, platform, app_version, permission, devices)
        SELECT app_id, platform, COALESCE(app_version, ''), authorization_status, count(*) FROM changed_new
        WHERE active = 1 AND authorization_status IS NOT NULL
        GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4
        ON CONFLICT (app_id, platform, app_version, permission) DO UPDATE SET devices = s.devices + excluded.devices;
    ELSIF TG_OP = 'DELETE' THEN
        UPDATE permission_stats s SET devices = s.devices - d.n
        FROM (SELECT app_id, platform, COALESCE(app_version, '') AS app_version, authorization_status AS permission, count(*) AS n
            FROM changed_old WHERE active = 1 AND authorization_status IS NOT NULL GROUP BY 1, 2, 3, 4) d
        WHERE s.app_id = d.app_id AND s.platform = d.platform AND s.app_version = d.app_version AND s.permission = d.permission;
    ELSE
        INSERT INTO permission_stats AS s (app_id, platform, app_version, permission, devices)
        SELECT app_id, platform, app_version, permission, sum(delta) FROM (
            SELECT app_id, platform, COALESCE(app_version, '') AS app_version, authorization_status AS permission, 1 AS delta
            FROM changed_new WHERE active = 1 AND authorization_status IS NOT NULL
            UNION ALL
            SELECT app_id, platform, COALESCE(app_version, ''), authorization_status, -1
            FROM changed_old WHERE active = 1 AND authorization_status IS NOT NULL
        ) d GROUP BY 1, 2, 3, 4 HAVING sum(delta) <> 0 ORDER BY 1, 2, 3, 4
        ON CONFLICT (app_id, platform, app_version, permission) DO UPDATE SET devices = s.devices + excluded.devices;
    END IF;
    RETURN NULL;
END
$$
;
-- PostgreSQL only
CREATE TRIGGER devices_permission_insert AFTER INSERT ON devices
REFERENCING NEW TABLE AS changed_new FOR EACH STATEMENT EXECUTE FUNCTION herald_permission_stats()
;
-- PostgreSQL only
CREATE TRIGGER devices_permission_update AFTER UPDATE ON devices
REFERENCING OLD TABLE AS changed_old NEW TABLE AS changed_new FOR EACH STATEMENT EXECUTE FUNCTION herald_permission_stats()
;
-- PostgreSQL only
CREATE TRIGGER devices_permission_delete AFTER DELETE ON devices
REFERENCING OLD TABLE AS changed_old FOR EACH STATEMENT EXECUTE FUNCTION herald_permission_stats()
;

-- migration: 19
-- The dashboard's recent notifications: newest first per app, read from an
-- index instead of sorting every notification of the app.
CREATE INDEX notifications_recent ON notifications (app_id, created_at)
;

-- migration: 20
-- The dashboard's waiting deliveries of a user: the notifications not yet
-- done (a delivery queued, sending or deferred), whose deliveries are looked up by the
-- user's devices — instead of every waiting delivery filtered by user (a million deferred
-- read for one user: 530 ms). Written as `recipients > …` so SQLite matches the query's term.
CREATE INDEX notifications_open ON notifications (app_id, created_at)
WHERE recipients > sent_count + failed_count + suppressed_count + cancelled_count
;

-- migration: 21
-- Dashboard sign-outs: a session's nonce until the session would have expired, so a
-- sign-out holds on every node and across restarts.
CREATE TABLE dashboard_signouts (nonce TEXT PRIMARY KEY, expires_at BIGINT NOT NULL)
;

-- migration: 22
-- Deliveries held by the policy engine, per app, kept by triggers on the notifications'
-- deferred counts: /metrics, /readyz and the dashboard read a few rows instead of counting
-- every deferred delivery (300,000 deferred: 19–29 ms a scrape on SQLite, 108 ms on PostgreSQL).
-- SQLite: one row per app, added to in place (one writer). PostgreSQL: a row per statement
-- that changed a count, summed when read and folded into one per app by the retention pass,
-- so concurrent writers never wait on one shared row.
CREATE TABLE deferred_totals (app_id TEXT NOT NULL, deferred BIGINT NOT NULL)
;
-- SQLite only
CREATE UNIQUE INDEX deferred_totals_app ON deferred_totals (app_id)
;
-- PostgreSQL only
ALTER TABLE deferred_totals ALTER COLUMN app_id TYPE TEXT COLLATE "C"
;
INSERT INTO deferred_totals (app_id, deferred)
SELECT app_id, count(*) FROM deliveries WHERE status = 'deferred' GROUP BY app_id
;
-- SQLite only
CREATE TRIGGER notifications_deferred_totals
AFTER UPDATE OF deferred_count ON notifications
WHEN NEW.deferred_count <> OLD.deferred_count
BEGIN
    INSERT INTO deferred_totals (app_id, deferred) VALUES (NEW.app_id, NEW.deferred_count - OLD.deferred_count)
    ON CONFLICT (app_id) DO UPDATE SET deferred = deferred + excluded.deferred;
END
;
-- PostgreSQL only
CREATE FUNCTION herald_deferred_totals() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO deferred_totals (app_id, deferred)
    SELECT n.app_id, sum(n.deferred_count - o.deferred_count)
    FROM changed_new n JOIN changed_old o ON o.id = n.id
    WHERE n.deferred_count <> o.deferred_count
    GROUP BY n.app_id;
    RETURN NULL;
END
$$
;
-- PostgreSQL only
CREATE TRIGGER notifications_deferred_totals AFTER UPDATE ON notifications
REFERENCING OLD TABLE AS changed_old NEW TABLE AS changed_new
FOR EACH STATEMENT EXECUTE FUNCTION herald_deferred_totals()
;

-- migration: 23
-- Confirmed delivery: the receipts devices report as a delivery reaches them (one per
-- delivery, however often reported), with the device's platform and app version then and
-- when its provider accepted it; counted on the notification and per (type, day) with the
-- other counters. The analytics' "accepted, not received" counts only deliveries to devices
-- whose build (platform and app version) has reported receipts (`receipts_build`): an app
-- build without receipts is not counted as losing them.
ALTER TABLE notifications ADD COLUMN received_count INTEGER NOT NULL DEFAULT 0
;
ALTER TABLE type_stats ADD COLUMN received INTEGER NOT NULL DEFAULT 0
;
CREATE TABLE receipts (
    app_id TEXT NOT NULL,
    delivery_id INTEGER NOT NULL,
    notification_id TEXT NOT NULL,
    device_id TEXT NOT NULL,
    platform TEXT NOT NULL,
    app_version TEXT,
    accepted_at BIGINT NOT NULL,
    received_at BIGINT NOT NULL,
    recorded_at BIGINT NOT NULL,
    displayed INTEGER NOT NULL,
    reports INTEGER NOT NULL DEFAULT 1,
    PRIMARY KEY (app_id, delivery_id)
)
;
-- PostgreSQL only
ALTER TABLE receipts ALTER COLUMN app_id TYPE TEXT COLLATE "C", ALTER COLUMN notification_id TYPE TEXT COLLATE "C", ALTER COLUMN device_id TYPE TEXT COLLATE "C"
;
CREATE INDEX receipts_notification ON receipts (notification_id)
;
CREATE INDEX receipts_build ON receipts (app_id, platform, app_version)
;
CREATE INDEX receipts_recorded ON receipts (recorded_at)
;
-- SQLite only
DROP TRIGGER notifications_type_stats
;
-- SQLite only
CREATE TRIGGER notifications_type_stats
AFTER UPDATE OF sent_count, failed_count, deferred_count, suppressed_count, cancelled_count, opened_count, received_count ON notifications
WHEN NEW.type IS NOT NULL AND NEW.day IS NOT NULL
BEGIN
    INSERT INTO type_stats (app_id, type, day, sent, failed, deferred, suppressed, cancelled, opened, received)
    VALUES (NEW.app_id, NEW.type, NEW.day, NEW.sent_count - OLD.sent_count, NEW.failed_count - OLD.failed_count,
        NEW.deferred_count - OLD.deferred_count, NEW.suppressed_count - OLD.suppressed_count,
        NEW.cancelled_count - OLD.cancelled_count, NEW.opened_count - OLD.opened_count,
        NEW.received_count - OLD.received_count)
    ON CONFLICT (app_id, type, day) DO UPDATE SET sent = sent + excluded.sent, failed = failed + excluded.failed,
        deferred = deferred + excluded.deferred, suppressed = suppressed + excluded.suppressed,
        cancelled = cancelled + excluded.cancelled, opened = opened + excluded.opened,
        received = received + excluded.received;
END
;
-- PostgreSQL only
CREATE OR REPLACE FUNCTION herald_type_stats() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO type_stats AS s (app_id, type, day, sent, failed, deferred, suppressed, cancelled, opened, received)
    SELECT n.app_id, n.type, n.day, sum(n.sent_count - o.sent_count), sum(n.failed_count - o.failed_count),
        sum(n.deferred_count - o.deferred_count), sum(n.suppressed_count - o.suppressed_count),
        sum(n.cancelled_count - o.cancelled_count), sum(n.opened_count - o.opened_count),
        sum(n.received_count - o.received_count)
    FROM changed_new n JOIN changed_old o ON o.id = n.id
    WHERE n.type IS NOT NULL AND n.day IS NOT NULL
        AND (n.sent_count, n.failed_count, n.deferred_count, n.suppressed_count, n.cancelled_count, n.opened_count, n.received_count)
            IS DISTINCT FROM (o.sent_count, o.failed_count, o.deferred_count, o.suppressed_count, o.cancelled_count, o.opened_count, o.received_count)
    GROUP BY n.app_id, n.type, n.day
    ORDER BY n.app_id, n.type, n.day
    ON CONFLICT (app_id, type, day) DO UPDATE SET sent = s.sent + excluded.sent, failed = s.failed + excluded.failed,
        deferred = s.deferred + excluded.deferred, suppressed = s.suppressed + excluded.suppressed,
        cancelled = s.cancelled + excluded.cancelled, opened = s.opened + excluded.opened,
        received = s.received + excluded.received;
    RETURN NULL;
END
$$
;

-- migration: 24
-- Deliveries answered and received per app, platform and hour: the Overview's received rate
-- per app and platform, read from a few rows. The results writer adds what it wrote accepted
-- or failed to the hour it wrote them; the receipts writer adds a delivery's first receipt to
-- the hour its delivery was accepted, so an hour's received ÷ accepted is the share of its
-- deliveries that arrived. Counted from this migration on (deliveries keep no platform to
-- count earlier ones by). SQLite: one row per (app, platform, hour), added to in place (one
-- writer). PostgreSQL: a row per transaction that counted, summed when read and folded into
-- one per (app, platform, hour) by the retention pass, so concurrent writers never wait on
-- one shared row.
CREATE TABLE platform_hours (
    app_id TEXT NOT NULL,
    platform TEXT NOT NULL,
    hour BIGINT NOT NULL,
    accepted BIGINT NOT NULL DEFAULT 0,
    failed BIGINT NOT NULL DEFAULT 0,
    received BIGINT NOT NULL DEFAULT 0
)
;
-- SQLite only
CREATE UNIQUE INDEX platform_hours_key ON platform_hours (app_id, platform, hour)
;
-- PostgreSQL only
ALTER TABLE platform_hours ALTER COLUMN app_id TYPE TEXT COLLATE "C", ALTER COLUMN platform TYPE TEXT COLLATE "C"
;
-- PostgreSQL only
CREATE INDEX platform_hours_key ON platform_hours (app_id, hour)
;

-- migration: 25
-- Live Activities. A device's push-to-start tokens, one per attributes type (the widget's
-- ActivityAttributes); an activity (the app's id) with its attributes type, last content state,
-- stale and dismissal dates, the last timestamp sent (each push's is later: the device ignores
-- an update that is not newer) and its broadcast channel; per device of an activity, its update
-- token (rotated tokens replace it) and state; and each push sent, with its decision trace.
CREATE TABLE activity_start_tokens (
    app_id TEXT NOT NULL,
    device_id TEXT NOT NULL,
    attributes_type TEXT NOT NULL,
    token TEXT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (app_id, device_id, attributes_type)
)
;
CREATE TABLE activities (
    app_id TEXT NOT NULL,
    activity_id TEXT NOT NULL,
    attributes_type TEXT,
    attributes TEXT,
    content_state TEXT,
    status TEXT NOT NULL,
    stale_at BIGINT,
    dismissal_at BIGINT,
    last_timestamp BIGINT NOT NULL DEFAULT 0,
    channel_id TEXT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (app_id, activity_id)
)
;
CREATE TABLE activity_devices (
    app_id TEXT NOT NULL,
    activity_id TEXT NOT NULL,
    device_id TEXT NOT NULL,
    token TEXT,
    status TEXT NOT NULL,
    reason TEXT,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (app_id, activity_id, device_id)
)
;
CREATE TABLE activity_pushes (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    app_id TEXT NOT NULL,
    activity_id TEXT NOT NULL,
    device_id TEXT,
    event TEXT NOT NULL,
    timestamp BIGINT NOT NULL,
    priority INTEGER NOT NULL,
    status TEXT NOT NULL,
    reason TEXT,
    trace TEXT,
    created_at BIGINT NOT NULL
)
;
CREATE INDEX activity_pushes_activity ON activity_pushes (app_id, activity_id, id)
;
CREATE INDEX activity_pushes_device ON activity_pushes (app_id, device_id, created_at)
;
-- PostgreSQL only
ALTER TABLE activity_start_tokens ALTER COLUMN app_id TYPE TEXT COLLATE "C", ALTER COLUMN device_id TYPE TEXT COLLATE "C", ALTER COLUMN attributes_type TYPE TEXT COLLATE "C"
;
-- PostgreSQL only
ALTER TABLE activities ALTER COLUMN app_id TYPE TEXT COLLATE "C", ALTER COLUMN activity_id TYPE TEXT COLLATE "C"
;
-- PostgreSQL only
ALTER TABLE activity_devices ALTER COLUMN app_id TYPE TEXT COLLATE "C", ALTER COLUMN activity_id TYPE TEXT COLLATE "C", ALTER COLUMN device_id TYPE TEXT COLLATE "C"
;

-- migration: 26
-- APNs broadcast channels (iOS 18): per app and environment, the channel id Apple gave, the
-- app's event key it stands for and its message storage policy (0 none, 1 the latest). The
-- channel id is the only handle Apple gives, so Herald keeps the mapping; Apple allows 10,000
-- per app and environment.
CREATE TABLE channels (
    app_id TEXT NOT NULL,
    environment TEXT NOT NULL,
    channel_id TEXT NOT NULL,
    event_key TEXT NOT NULL,
    storage INTEGER NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (app_id, channel_id)
)
;
CREATE INDEX channels_event ON channels (app_id, event_key)
;
-- PostgreSQL only
ALTER TABLE channels ALTER COLUMN app_id TYPE TEXT COLLATE "C", ALTER COLUMN channel_id TYPE TEXT COLLATE "C"
;

-- migration: 27
-- Deliveries the policy engine deferred together (a zone's users inside quiet hours, say)
-- kept as one page that lists them, due when their deferral ends, instead of a row each:
-- `reason` is why they wait, set while the page waits and cleared when it is first handed
-- out. Unclaimed pages are found by due time.
ALTER TABLE broadcast_pages ADD COLUMN reason TEXT
;
CREATE INDEX broadcast_pages_waiting ON broadcast_pages (due_at) WHERE claimed_by IS NULL
;

-- migration: 28
-- A notification's deliveries per build (the device's platform and app version; '' for none):
-- sent, failed, first receipts and first opens, and when the first and last were sent. The
-- funnel per build and "accepted, not received" read these rows instead of every delivery: a
-- notification sent entirely before the receipt window counts its sent less its received, one
-- whose sending spans the window's edge alone has its deliveries read. Writers add to a row
-- after updating its notification's counters in the same transaction. Deliveries already
-- answered are counted here under their device's build now, receipts under theirs.
CREATE TABLE notification_builds (
    notification_id TEXT NOT NULL,
    platform TEXT NOT NULL,
    app_version TEXT NOT NULL,
    sent BIGINT NOT NULL DEFAULT 0,
    failed BIGINT NOT NULL DEFAULT 0,
    received BIGINT NOT NULL DEFAULT 0,
    opened BIGINT NOT NULL DEFAULT 0,
    first_sent_at BIGINT,
    last_sent_at BIGINT,
    PRIMARY KEY (notification_id, platform, app_version)
)
;
-- PostgreSQL only
ALTER TABLE notification_builds ALTER COLUMN notification_id TYPE TEXT COLLATE "C", ALTER COLUMN platform TYPE TEXT COLLATE "C", ALTER COLUMN app_version TYPE TEXT COLLATE "C"
;
INSERT INTO notification_builds (notification_id, platform, app_version, sent, failed, first_sent_at, last_sent_at)
SELECT d.notification_id, COALESCE(v.platform, ''), COALESCE(v.app_version, ''),
    sum(CASE WHEN d.status = 'sent' THEN 1 ELSE 0 END), sum(CASE WHEN d.status = 'failed' THEN 1 ELSE 0 END),
    min(CASE WHEN d.status = 'sent' THEN d.updated_at END), max(CASE WHEN d.status = 'sent' THEN d.updated_at END)
FROM deliveries d LEFT JOIN devices v ON v.app_id = d.app_id AND v.device_id = d.device_id
WHERE d.status IN ('sent', 'failed')
GROUP BY d.notification_id, COALESCE(v.platform, ''), COALESCE(v.app_version, '')
;
INSERT INTO notification_builds (notification_id, platform, app_version, received)
SELECT r.notification_id, r.platform, COALESCE(r.app_version, ''), count(*) FROM receipts r WHERE true
GROUP BY r.notification_id, r.platform, COALESCE(r.app_version, '')
ON CONFLICT (notification_id, platform, app_version) DO UPDATE SET received = excluded.received
;
INSERT INTO notification_builds (notification_id, platform, app_version, opened)
SELECT o.notification_id, COALESCE(v.platform, ''), COALESCE(v.app_version, ''), count(*) FROM opens o
JOIN deliveries d ON d.id = o.delivery_id AND d.app_id = o.app_id AND d.status IN ('sent', 'failed')
LEFT JOIN devices v ON v.app_id = o.app_id AND v.device_id = o.device_id
WHERE true
GROUP BY o.notification_id, COALESCE(v.platform, ''), COALESCE(v.app_version, '')
ON CONFLICT (notification_id, platform, app_version) DO UPDATE SET opened = excluded.opened
;

-- migration: 29
-- The funnel per type, day (the notification's) and build, summed: what `notification_builds`
-- holds added up over the notifications of each (type, day), so the Analytics page and the
-- API's `by=` read a row per type, day and build instead of one per notification. Writers add
-- to it in the statement after `notification_builds`, in key order. "Accepted, not received"
-- is the sums' sent less received, less that of the notifications sent within the receipt
-- window (found per build by when they were last sent, through a partial index of the rows
-- whose sent and received differ).
CREATE TABLE type_builds (
    app_id TEXT NOT NULL,
    type TEXT NOT NULL,
    day BIGINT NOT NULL,
    platform TEXT NOT NULL,
    app_version TEXT NOT NULL,
    sent BIGINT NOT NULL DEFAULT 0,
    failed BIGINT NOT NULL DEFAULT 0,
    received BIGINT NOT NULL DEFAULT 0,
    opened BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (app_id, type, day, platform, app_version)
)
;
-- PostgreSQL only
ALTER TABLE type_builds ALTER COLUMN app_id TYPE TEXT COLLATE "C", ALTER COLUMN type TYPE TEXT COLLATE "C", ALTER COLUMN platform TYPE TEXT COLLATE "C", ALTER COLUMN app_version TYPE TEXT COLLATE "C"
;
INSERT INTO type_builds (app_id, type, day, platform, app_version, sent, failed, received, opened)
SELECT n.app_id, n.type, n.day, b.platform, b.app_version, sum(b.sent), sum(b.failed), sum(b.received), sum(b.opened)
FROM notification_builds b JOIN notifications n ON n.id = b.notification_id
WHERE n.type IS NOT NULL AND n.day IS NOT NULL
GROUP BY n.app_id, n.type, n.day, b.platform, b.app_version
;
CREATE INDEX notification_builds_unreceived ON notification_builds (platform, app_version, last_sent_at) WHERE sent <> received
;
