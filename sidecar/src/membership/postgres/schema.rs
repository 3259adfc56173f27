//! The membership tables, created idempotently at open, the statements every operation uses,
//! and the open-time errors (each naming `SIGX_MEMBERSHIP_DSN`).
//!
//! Hosts of a fleet usually start together: the schema is created in one transaction under a
//! transaction-scoped advisory lock, so they take turns and each one after the first finds the
//! tables in place. Tables already present need no DDL, so a role with row privileges only can
//! open a database an owner role prepared.

use super::ChangeOrdering;
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, Config, Statement};

/// The advisory lock key the schema creation holds ("sigxmemb" in ASCII).
const SCHEMA_LOCK: i64 = 0x7369_6778_6d65_6d62;

/// The channel every write notifies (payload: its change sequence number).
pub(super) const CHANNEL: &str = "sigx_membership";

/// The PostgreSQL membership store cannot be used; reported before anything binds (exit 64).
/// Never shows the password.
#[derive(Debug, thiserror::Error)]
pub enum PostgresOpenError {
    /// The connection string does not parse.
    #[error(
        "SIGX_MEMBERSHIP_DSN (--membership-dsn) is not a valid PostgreSQL connection string: \
         {reason}; write it as postgres://USER:PASSWORD@HOST:PORT/DATABASE or as key=value pairs \
         (host=... port=... user=... password=... dbname=...)"
    )]
    BadDsn {
        /// What the parser said.
        reason: String,
    },
    /// No server answered.
    #[error(
        "cannot reach the PostgreSQL membership store at {target}: {reason}; check the host and \
         port in SIGX_MEMBERSHIP_DSN (--membership-dsn), that the server is running, and that \
         the network allows the connection"
    )]
    Unreachable {
        /// host:port/database, without credentials.
        target: String,
        /// What the client said.
        reason: String,
    },
    /// The server refused the user or password.
    #[error(
        "the PostgreSQL membership store at {target} refused user {user:?}: {reason}; check the \
         user and password in SIGX_MEMBERSHIP_DSN (--membership-dsn)"
    )]
    Auth {
        /// host:port/database.
        target: String,
        /// The user in the DSN.
        user: String,
        /// What the server said.
        reason: String,
    },
    /// The database named in the DSN does not exist.
    #[error(
        "the PostgreSQL membership store at {target} has no database {database:?}; create it \
         (CREATE DATABASE {database}) or fix the database in SIGX_MEMBERSHIP_DSN \
         (--membership-dsn)"
    )]
    NoDatabase {
        /// host:port/database.
        target: String,
        /// The database in the DSN.
        database: String,
    },
    /// Anything else while preparing the tables (a missing privilege, say).
    #[error(
        "the PostgreSQL membership store at {target} cannot be prepared: {reason}; the user in \
         SIGX_MEMBERSHIP_DSN needs CREATE on the schema once (or an owner creates the tables by \
         starting one host), then SELECT, INSERT, UPDATE, DELETE on sigx_leases, sigx_changes \
         and sigx_change_counter"
    )]
    Schema {
        /// host:port/database.
        target: String,
        /// What the server said.
        reason: String,
    },
}

/// `host:port/database`, for messages.
pub(super) fn target(config: &Config) -> String {
    crate::state::postgres::describe_target(config)
}

/// An error with its cause chain and the server's message, on one line.
pub(super) fn describe(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return format!("{} ({})", db.message(), db.code().code());
    }
    let mut out = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// Names a failure to connect or prepare.
pub(super) fn open_error(config: &Config, e: &tokio_postgres::Error) -> PostgresOpenError {
    let target = target(config);
    let user = config.get_user().unwrap_or("").to_string();
    let reason = describe(e);
    match e.code() {
        Some(c)
            if *c == SqlState::INVALID_PASSWORD
                || *c == SqlState::INVALID_AUTHORIZATION_SPECIFICATION =>
        {
            PostgresOpenError::Auth {
                target,
                user,
                reason,
            }
        }
        Some(c) if *c == SqlState::INVALID_CATALOG_NAME => PostgresOpenError::NoDatabase {
            target,
            database: config
                .get_dbname()
                .or(config.get_user())
                .unwrap_or("")
                .to_string(),
        },
        Some(_) => PostgresOpenError::Schema { target, reason },
        None if reason.contains("password") => PostgresOpenError::Auth {
            target,
            user,
            reason,
        },
        None => PostgresOpenError::Unreachable { target, reason },
    }
}

/// Creates the tables if missing, in one transaction under the advisory lock.
pub(super) async fn create(
    client: &mut Client,
    ordering: ChangeOrdering,
) -> Result<(), tokio_postgres::Error> {
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK])
        .await?;
    let exists: bool = tx
        .query_one("SELECT to_regclass('sigx_change_counter') IS NOT NULL", &[])
        .await?
        .get(0);
    if !exists {
        tx.batch_execute(
            "CREATE TABLE IF NOT EXISTS sigx_leases (
                 id TEXT COLLATE \"C\" PRIMARY KEY,
                 holder TEXT NOT NULL,
                 descriptor TEXT NOT NULL,
                 ttl_ms BIGINT NOT NULL,
                 version BIGINT NOT NULL
             );
             CREATE TABLE IF NOT EXISTS sigx_changes (
                 seq BIGINT PRIMARY KEY,
                 id TEXT COLLATE \"C\" NOT NULL,
                 op TEXT NOT NULL CHECK (op IN ('upsert', 'delete')),
                 holder TEXT,
                 descriptor TEXT,
                 ttl_ms BIGINT
             );
             CREATE TABLE IF NOT EXISTS sigx_change_counter (
                 one_row BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one_row),
                 seq BIGINT NOT NULL
             );
             INSERT INTO sigx_change_counter (one_row, seq) VALUES (TRUE, 0)
                 ON CONFLICT DO NOTHING;",
        )
        .await?;
    }
    if ordering == ChangeOrdering::UnorderedSequence {
        tx.batch_execute("CREATE SEQUENCE IF NOT EXISTS sigx_changes_unordered")
            .await?;
    }
    tx.commit().await
}

/// The statements, prepared once per connection.
pub(super) struct Statements {
    /// Takes the next change number (see [`ChangeOrdering`] for why it is a counter row).
    pub bump: Statement,
    pub own_for_update: Statement,
    pub version_for_update: Statement,
    pub log_upsert: Statement,
    pub log_delete: Statement,
    pub update_lease: Statement,
    pub insert_lease: Statement,
    pub delete_own: Statement,
    pub delete_at: Statement,
    pub compact: Statement,
    pub notify: Statement,
    pub read_one: Statement,
    pub bounds: Statement,
    pub log_after: Statement,
    pub snapshot: Statement,
}

pub(super) async fn prepare(
    c: &Client,
    ordering: ChangeOrdering,
) -> Result<Statements, tokio_postgres::Error> {
    let bump = match ordering {
        ChangeOrdering::Serialized => {
            "UPDATE sigx_change_counter SET seq = seq + 1 WHERE one_row RETURNING seq"
        }
        ChangeOrdering::UnorderedSequence => "SELECT nextval('sigx_changes_unordered')",
    };
    let (bump, own_for_update, version_for_update, log_upsert, log_delete, update_lease) = futures::try_join!(
        c.prepare(bump),
        c.prepare("SELECT holder, version, ttl_ms FROM sigx_leases WHERE id = $1 FOR UPDATE"),
        c.prepare("SELECT version FROM sigx_leases WHERE id = $1 FOR UPDATE"),
        c.prepare(
            "INSERT INTO sigx_changes (seq, id, op, holder, descriptor, ttl_ms)
             VALUES ($1, $2, 'upsert', $3, $4, $5)"
        ),
        c.prepare(
            "INSERT INTO sigx_changes (seq, id, op, holder) VALUES ($1, $2, 'delete', $3::text)"
        ),
        c.prepare(
            "UPDATE sigx_leases SET holder = $2, descriptor = $3, ttl_ms = $4, version = $5
             WHERE id = $1 AND version = $6"
        ),
    )?;
    let (insert_lease, delete_own, delete_at, compact, notify) = futures::try_join!(
        c.prepare(
            "INSERT INTO sigx_leases (id, holder, descriptor, ttl_ms, version)
             VALUES ($1, $2, $3, $4, $5)"
        ),
        c.prepare("DELETE FROM sigx_leases WHERE id = $1 AND holder = $2"),
        c.prepare("DELETE FROM sigx_leases WHERE id = $1 AND version = $2"),
        c.prepare("DELETE FROM sigx_changes WHERE seq <= $1"),
        c.prepare("SELECT pg_notify($1, $2)"),
    )?;
    let (read_one, bounds, log_after, snapshot) = futures::try_join!(
        c.prepare("SELECT holder, descriptor, ttl_ms, version FROM sigx_leases WHERE id = $1"),
        c.prepare("SELECT MIN(seq), COALESCE(MAX(seq), 0)::BIGINT FROM sigx_changes"),
        c.prepare(
            "SELECT seq, id, op, holder, descriptor, ttl_ms FROM sigx_changes
             WHERE seq > $1 ORDER BY seq"
        ),
        c.prepare("SELECT id, holder, descriptor, ttl_ms, version FROM sigx_leases"),
    )?;
    Ok(Statements {
        bump,
        own_for_update,
        version_for_update,
        log_upsert,
        log_delete,
        update_lease,
        insert_lease,
        delete_own,
        delete_at,
        compact,
        notify,
        read_one,
        bounds,
        log_after,
        snapshot,
    })
}
