//! What every build knows of Postgres, with or without the `postgres` feature: valid schema
//! names, fresh ones, the test server's variable, URLs without passwords.

/// Whether `name` can be a schema of the store: 1 to 63 of `a-z`, `0-9`, `_`, not starting
/// with a digit or `pg_` (it is written into `CREATE SCHEMA` and `search_path` as is).
pub fn valid_schema_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && !name.starts_with("pg_")
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// The environment variable that names a Postgres server for the tests that need one.
pub const TEST_POSTGRES_ENV: &str = "REPLAYLAB_TEST_POSTGRES";

/// The Postgres server tests should use (`REPLAYLAB_TEST_POSTGRES`). Unset, a test that needs
/// it says so on stderr, with how to start one, and is skipped by returning `None`; but under
/// CI (`CI` set) it panics: CI never skips them.
pub fn test_postgres(test: &str) -> Option<String> {
    match std::env::var(TEST_POSTGRES_ENV) {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var_os("CI").is_some() => {
            panic!("{test}: {TEST_POSTGRES_ENV} is not set; CI must run the Postgres tests (.ci/run starts a cluster)")
        }
        _ => {
            eprintln!(
                "{test}: skipped, no Postgres: start one with `.ci/postgres start /tmp/replaylab-pg` and set \
                 {TEST_POSTGRES_ENV}=\"$(cat /tmp/replaylab-pg/url)\""
            );
            None
        }
    }
}

/// A schema name no other call in this process made: `prefix`, the process id and a counter.
pub fn fresh_schema(prefix: &str) -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let number = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let prefix: String = prefix
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '_' })
        .take(32)
        .collect();
    format!("{prefix}_{}_{number}", std::process::id())
}

/// `url` with any password replaced by `***`, for messages.
pub(crate) fn without_password(url: &str) -> String {
    if let Some((scheme, rest)) = url.split_once("://") {
        if let Some((credentials, host)) = rest.rsplit_once('@') {
            if let Some((user, _)) = credentials.split_once(':') {
                return format!("{scheme}://{user}:***@{host}");
            }
        }
        return url.to_owned();
    }
    // libpq's key=value form.
    url.split_whitespace()
        .map(|pair| if pair.starts_with("password=") { "password=***" } else { pair })
        .collect::<Vec<_>>()
        .join(" ")
}
