//! The schema, created or migrated idempotently at open, and the open-time errors.
//!
//! Every host of a fleet opens the store as it starts, usually together: the whole migration is
//! one transaction that first takes a transaction-scoped advisory lock, so the hosts take turns
//! and each one after the first finds the schema in place. A schema already at this version
//! needs no DDL at all, so an application role with only row privileges can open a database an
//! owner role prepared.

use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, Config};

/// The schema this code writes; older databases are migrated forward when opened.
pub const SCHEMA_VERSION: i32 = 2;

/// The advisory lock key the migration holds ("sigxstat" in ASCII).
const MIGRATION_LOCK: i64 = 0x7369_6778_7374_6174;

/// The PostgreSQL state store cannot be used; reported before anything binds (exit 64). Never
/// shows the password.
#[derive(Debug, thiserror::Error)]
pub enum PostgresStateError {
    /// The connection string does not parse.
    #[error(
        "SIGX_STATE_DSN is not a valid PostgreSQL connection string: {reason}; write it as \
         postgres://USER:PASSWORD@HOST:PORT/DATABASE or as key=value pairs \
         (host=... port=... user=... password=... dbname=...)"
    )]
    BadDsn {
        /// What the parser said.
        reason: String,
    },
    /// No server answered.
    #[error(
        "cannot reach the PostgreSQL state store at {target}: {reason}; check the host and port \
         in SIGX_STATE_DSN, that the server is running, and that the network allows the \
         connection"
    )]
    Unreachable {
        /// host:port/database, without credentials.
        target: String,
        /// What the client said.
        reason: String,
    },
    /// The server refused the user or password.
    #[error(
        "the PostgreSQL state store at {target} refused user {user:?}: {reason}; check the user \
         and password in SIGX_STATE_DSN (the Secret the ActorCluster's state.secretRef names)"
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
        "the PostgreSQL state store at {target} has no database {database:?}; create it \
         (CREATE DATABASE {database}) or fix the database in SIGX_STATE_DSN"
    )]
    NoDatabase {
        /// host:port/database.
        target: String,
        /// The database in the DSN.
        database: String,
    },
    /// The user may connect but not create or use the tables.
    #[error(
        "user {user:?} lacks a privilege the state store needs at {target}: {reason}; grant it \
         CREATE on the schema (to create the tables once), SELECT on sigx_state_schema, SELECT, \
         INSERT, UPDATE on sigx_actor_epochs and SELECT, INSERT, UPDATE, DELETE on \
         sigx_actor_state and sigx_reminders"
    )]
    Permission {
        /// host:port/database.
        target: String,
        /// The user in the DSN.
        user: String,
        /// What was refused.
        reason: String,
    },
    /// The database was written by a newer sigx.
    #[error(
        "the PostgreSQL state store at {target} has schema version {found} (table \
         sigx_state_schema), newer than this sidecar's {SCHEMA_VERSION}; run a sidecar at least \
         as new as the one that wrote it"
    )]
    TooNew {
        /// host:port/database.
        target: String,
        /// The version found.
        found: i32,
    },
    /// Any other failure while preparing the schema.
    #[error("the PostgreSQL state store at {target} cannot be prepared: {reason}")]
    Schema {
        /// host:port/database.
        target: String,
        /// What the server said.
        reason: String,
    },
}

/// `host:port/database` of a DSN, for messages (never the password).
pub(super) fn target(config: &Config) -> String {
    use tokio_postgres::config::Host;
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(h)) => h.clone(),
        Some(Host::Unix(p)) => p.display().to_string(),
        None => "localhost".to_string(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let db = config
        .get_dbname()
        .or(config.get_user())
        .unwrap_or("postgres");
    format!("{host}:{port}/{db}")
}

/// Names a failure to connect.
pub(super) fn connect_error(config: &Config, e: &tokio_postgres::Error) -> PostgresStateError {
    let target = target(config);
    let user = config.get_user().unwrap_or("").to_string();
    let reason = describe(e);
    match e.code() {
        Some(c)
            if *c == SqlState::INVALID_PASSWORD
                || *c == SqlState::INVALID_AUTHORIZATION_SPECIFICATION =>
        {
            PostgresStateError::Auth {
                target,
                user,
                reason,
            }
        }
        Some(c) if *c == SqlState::INVALID_CATALOG_NAME => PostgresStateError::NoDatabase {
            target,
            database: config
                .get_dbname()
                .or(config.get_user())
                .unwrap_or("")
                .to_string(),
        },
        Some(c) if *c == SqlState::INSUFFICIENT_PRIVILEGE => PostgresStateError::Permission {
            target,
            user,
            reason,
        },
        Some(_) => PostgresStateError::Schema { target, reason },
        // The client's own authentication errors (e.g. a password the server asked for and the
        // DSN lacks) carry no SQLSTATE.
        None if reason.contains("password") => PostgresStateError::Auth {
            target,
            user,
            reason,
        },
        None => PostgresStateError::Unreachable { target, reason },
    }
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

/// Creates the schema or migrates it forward, in one transaction under the advisory lock, then
/// checks the row privileges every operation needs.
pub(super) async fn migrate(
    client: &mut Client,
    config: &Config,
) -> Result<(), PostgresStateError> {
    let named = |e: tokio_postgres::Error| connect_error(config, &e);
    let tx = client.transaction().await.map_err(named)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(named)?;
    let exists: bool = tx
        .query_one("SELECT to_regclass('sigx_state_schema') IS NOT NULL", &[])
        .await
        .map_err(named)?
        .get(0);
    let found: Option<i32> = if exists {
        tx.query_one("SELECT MAX(version) FROM sigx_state_schema", &[])
            .await
            .map_err(named)?
            .get(0)
    } else {
        None
    };
    match found {
        Some(v) if v > SCHEMA_VERSION => {
            return Err(PostgresStateError::TooNew {
                target: target(config),
                found: v,
            });
        }
        Some(v) if v == SCHEMA_VERSION => {}
        // Absent, empty or older: every table is created if missing, so creating is migrating.
        _ => {
            tx.batch_execute(
                "CREATE TABLE IF NOT EXISTS sigx_state_schema (version INTEGER NOT NULL);
                 CREATE TABLE IF NOT EXISTS sigx_actor_epochs (
                     actor_type TEXT COLLATE \"C\" NOT NULL,
                     actor_key TEXT COLLATE \"C\" NOT NULL,
                     epoch BIGINT NOT NULL,
                     PRIMARY KEY (actor_type, actor_key)
                 );
                 CREATE TABLE IF NOT EXISTS sigx_actor_state (
                     actor_type TEXT COLLATE \"C\" NOT NULL,
                     actor_key TEXT COLLATE \"C\" NOT NULL,
                     key TEXT COLLATE \"C\" NOT NULL,
                     value BYTEA NOT NULL,
                     epoch BIGINT NOT NULL,
                     PRIMARY KEY (actor_type, actor_key, key)
                 );
                 CREATE TABLE IF NOT EXISTS sigx_reminders (
                     actor_type TEXT COLLATE \"C\" NOT NULL,
                     actor_key TEXT COLLATE \"C\" NOT NULL,
                     name TEXT COLLATE \"C\" NOT NULL,
                     shard INTEGER NOT NULL,
                     due_ms BIGINT NOT NULL,
                     period_ms BIGINT NOT NULL,
                     payload BYTEA NOT NULL,
                     next_ms BIGINT NOT NULL,
                     attempts INTEGER NOT NULL,
                     version BIGINT NOT NULL,
                     claimed_by TEXT,
                     claim_until_ms BIGINT NOT NULL,
                     PRIMARY KEY (actor_type, actor_key, name)
                 );
                 CREATE INDEX IF NOT EXISTS sigx_reminders_due ON sigx_reminders (shard, next_ms);
                 DELETE FROM sigx_state_schema;
                 INSERT INTO sigx_state_schema (version) VALUES (2);",
            )
            .await
            .map_err(named)?;
        }
    }
    tx.commit().await.map_err(named)?;
    let allowed: bool = client
        .query_one(
            "SELECT has_table_privilege('sigx_actor_epochs', 'SELECT, INSERT, UPDATE')
                AND has_table_privilege('sigx_actor_state', 'SELECT, INSERT, UPDATE, DELETE')
                AND has_table_privilege('sigx_reminders', 'SELECT, INSERT, UPDATE, DELETE')",
            &[],
        )
        .await
        .map_err(named)?
        .get(0);
    if !allowed {
        return Err(PostgresStateError::Permission {
            target: target(config),
            user: config.get_user().unwrap_or("").to_string(),
            reason: "row privileges on the state tables are missing".to_string(),
        });
    }
    Ok(())
}
