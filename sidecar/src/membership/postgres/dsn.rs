//! Which connection string `--membership postgres` uses, validated with the rest of the
//! configuration before anything binds.

use std::path::Path;
use std::str::FromStr;

/// A membership DSN setting that is wrong, named.
#[derive(Debug, thiserror::Error)]
pub enum MembershipDsnError {
    /// `--membership postgres` without any connection string.
    #[error(
        "SIGX_MEMBERSHIP=postgres needs a connection string: set --membership-dsn-file \
         (SIGX_MEMBERSHIP_DSN_FILE) or --membership-dsn (SIGX_MEMBERSHIP_DSN); without them the \
         state store's --state-dsn is used when given"
    )]
    Missing,
    /// A DSN flag given with another provider.
    #[error(
        "{name} is set but SIGX_MEMBERSHIP is not postgres: it only applies to \
         --membership postgres; set it or remove {name}"
    )]
    Mismatch {
        /// The setting.
        name: &'static str,
    },
    /// The string is empty, unreadable or does not parse.
    #[error("{0}")]
    Bad(String),
}

/// The DSN for `--membership postgres`: `--membership-dsn`, else `--membership-dsn-file`, else
/// the state store's `--state-dsn` / `--state-dsn-file` (one database for both is the usual
/// fleet). `postgres` is false for the other providers: then the membership flags must be unset.
pub fn resolve(
    postgres: bool,
    dsn: Option<&str>,
    dsn_file: Option<&Path>,
    state_dsn: Option<&str>,
    state_dsn_file: Option<&Path>,
) -> Result<Option<String>, MembershipDsnError> {
    if !postgres {
        if dsn.is_some() {
            return Err(MembershipDsnError::Mismatch {
                name: "SIGX_MEMBERSHIP_DSN (--membership-dsn)",
            });
        }
        if dsn_file.is_some() {
            return Err(MembershipDsnError::Mismatch {
                name: "SIGX_MEMBERSHIP_DSN_FILE (--membership-dsn-file)",
            });
        }
        return Ok(None);
    }
    let read = |name: &str, file: &Path| {
        std::fs::read_to_string(file)
            .map(|s| s.trim().to_string())
            .map_err(|e| MembershipDsnError::Bad(format!("{name}={file:?} cannot be read: {e}")))
    };
    let (name, value) = match (dsn, dsn_file, state_dsn, state_dsn_file) {
        (Some(d), ..) => ("SIGX_MEMBERSHIP_DSN", d.trim().to_string()),
        (None, Some(f), ..) => (
            "SIGX_MEMBERSHIP_DSN_FILE",
            read("SIGX_MEMBERSHIP_DSN_FILE", f)?,
        ),
        (None, None, Some(d), _) => ("SIGX_STATE_DSN", d.trim().to_string()),
        (None, None, None, Some(f)) => ("SIGX_STATE_DSN_FILE", read("SIGX_STATE_DSN_FILE", f)?),
        (None, None, None, None) => return Err(MembershipDsnError::Missing),
    };
    if value.is_empty() {
        return Err(MembershipDsnError::Bad(format!(
            "the PostgreSQL membership connection string ({name}) is empty"
        )));
    }
    if let Err(e) = tokio_postgres::Config::from_str(&value) {
        return Err(MembershipDsnError::Bad(format!(
            "{name} is not a valid PostgreSQL connection string for the membership store: {e}; \
             write it as postgres://USER:PASSWORD@HOST:PORT/DATABASE or as key=value pairs"
        )));
    }
    Ok(Some(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dsn_is_required_named_and_falls_back_to_the_state_dsn() {
        let err = resolve(true, None, None, None, None).unwrap_err();
        assert!(err.to_string().contains("--membership-dsn"), "{err}");
        assert_eq!(
            resolve(true, Some(" host=db "), None, Some("host=other"), None).unwrap(),
            Some("host=db".to_string())
        );
        assert_eq!(
            resolve(true, None, None, Some("host=state"), None).unwrap(),
            Some("host=state".to_string())
        );
        let err = resolve(false, Some("host=db"), None, None, None).unwrap_err();
        assert!(err.to_string().contains("--membership-dsn"), "{err}");
        let err = resolve(true, Some("postgres://a:b@h:notaport/d"), None, None, None).unwrap_err();
        assert!(err.to_string().contains("SIGX_MEMBERSHIP_DSN"), "{err}");
        assert!(
            !err.to_string().contains(":b@"),
            "never the password: {err}"
        );
        let err = resolve(true, None, Some(Path::new("/no/such/file")), None, None).unwrap_err();
        assert!(
            err.to_string().contains("SIGX_MEMBERSHIP_DSN_FILE"),
            "{err}"
        );
        assert_eq!(
            resolve(false, None, None, Some("host=s"), None).unwrap(),
            None
        );
    }
}
