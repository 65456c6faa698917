-- Sign-in sessions of the HTTP API and dashboard (issue 23 item 3, execution/apisession.go): a
-- row per browser sign-in, in the database that every `taskling serve` of a fleet shares, so
-- that any replica knows a session and a sign-out on one ends it on all. A session ends when it
-- expires, when its browser signs out, and when its principal's token is removed or replaced.
CREATE TABLE taskling.api_session (
    -- SHA-256 of the random session id the cookie holds: whoever reads this table cannot sign in.
    id_sha256   bytea       PRIMARY KEY,
    principal   text        NOT NULL,
    -- Opaque to the database: what the server checks the principal's token against (a
    -- fingerprint of the token's hash), so that a new token for the same name ends the session.
    credential  text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL
);
-- Ending a principal's sessions.
CREATE INDEX api_session_principal_idx ON taskling.api_session (principal);
-- Deleting the expired ones, at each sign-in.
CREATE INDEX api_session_expires_idx ON taskling.api_session (expires_at);
