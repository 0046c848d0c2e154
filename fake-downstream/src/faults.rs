//! Fault rules: which request to disturb, and how.
//!
//! A rule matches on method, path, tenant, idempotency key and the n-th matching request;
//! it fires once, n times, or always; among installed rules the first that fires wins.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Identifies an installed rule (its install order, from 1).
pub type FaultRuleId = u64;

/// What a rule does to the request it fires on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FaultAction {
    /// Keep the request before commit until the rule is released.
    Hold,
    /// No effect, and no answer ever: the connection stays open and silent.
    DropBeforeCommit,
    /// No effect; the connection is closed at once without an answer.
    ResetBeforeCommit,
    /// Commit the effect, then close the connection without answering.
    CommitThenDrop,
    /// Commit the effect, then answer after the delay.
    CommitThenDelay(Duration),
    /// Commit the effect, then answer with this status (a 5xx) instead of the real answer.
    CommitThenError(u16),
    /// Commit the effect, then answer with a truncated body.
    CommitThenMalformed,
    /// Wait the delay, then handle the request normally.
    DelayBeforeCommit(Duration),
    /// No effect: the request is refused as the dialect refuses a client over its rate limit
    /// (GitHub's 403 secondary rate limit, Slack's 429 `ratelimited`, ...), with a
    /// `Retry-After` of this many whole seconds.
    RateLimited(Duration),
}

impl FaultAction {
    /// The action's snake_case name, as written in rule files.
    pub fn name(self) -> &'static str {
        match self {
            FaultAction::Hold => "hold",
            FaultAction::DropBeforeCommit => "drop_before_commit",
            FaultAction::ResetBeforeCommit => "reset_before_commit",
            FaultAction::CommitThenDrop => "commit_then_drop",
            FaultAction::CommitThenDelay(_) => "commit_then_delay",
            FaultAction::CommitThenError(_) => "commit_then_error",
            FaultAction::CommitThenMalformed => "commit_then_malformed",
            FaultAction::DelayBeforeCommit(_) => "delay_before_commit",
            FaultAction::RateLimited(_) => "rate_limited",
        }
    }
}

/// How many times a rule fires before it is spent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Times {
    /// Fires this many times.
    Count(u32),
    /// Never spent.
    Always,
}

/// Which requests a rule looks at. Every field that is set must match; a rule parsed from its
/// file form sets at least one (an empty `match` would disturb every request, reads included).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleMatch {
    /// HTTP method, e.g. `POST` (case-insensitive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// Exact path, or a prefix ending in `*` (`/v1/tickets/*`). The query is not part of it.
    /// [`FaultRule::from_json`] refuses one no business route serves (see
    /// [`FaultRule::check_path`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Tenant named in the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// `Idempotency-Key` header.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// Fire first on the n-th request that matches the fields above (from 1); earlier matching
    /// requests pass through untouched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nth: Option<u32>,
}

/// A fault rule. Its file form (JSON, TOML) is
/// The longest `delay` a fault may hold a request or an answer: a day, the cap every duration
/// of a scenario has (a longer one outlasts any run and overflows the simulated clock's sums).
pub const MAX_FAULT_DELAY: Duration = Duration::from_secs(24 * 60 * 60);

/// `{"match": {...}, "action": "commit_then_delay", "delay": "3s", "times": 1}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "RuleSpec", into = "RuleSpec")]
pub struct FaultRule {
    /// Which requests it looks at.
    pub matches: RuleMatch,
    /// What it does when it fires.
    pub action: FaultAction,
    /// How often it fires.
    pub times: Times,
}

impl FaultRule {
    /// A rule that fires once on the requests `matches` selects.
    pub fn once(matches: RuleMatch, action: FaultAction) -> Self {
        Self { matches, action, times: Times::Count(1) }
    }

    /// Parses a rule from its JSON form, e.g.
    /// `{"match": {"path": "/v1/tickets", "idempotency_key": "k3"}, "action": "commit_then_drop", "times": 1}`.
    /// Besides the checks of every parse (an empty `match` is refused), the path must be one
    /// the service serves ([`FaultRule::check_path`]).
    pub fn from_json(text: &[u8]) -> Result<Self, String> {
        let spec: RuleSpec = serde_json::from_slice(text).map_err(|error| error.to_string())?;
        let rule: FaultRule = spec.try_into()?;
        rule.check_path()?;
        Ok(rule)
    }

    /// Refuses a `path` no business route serves, exact (`/v1/tickets/ticket_1` for the route
    /// `/v1/tickets/{id}`) or as a prefix ending in `*`: such a rule could never fire.
    /// [`FaultRule::from_json`] (the admin API) calls it. Deserializing a rule (scenario files)
    /// does not: there a rule that never fires makes the run `unknown` and names the rule,
    /// which the harness's premise tests rely on.
    pub fn check_path(&self) -> Result<(), String> {
        let Some(path) = self.matches.path.as_deref() else { return Ok(()) };
        if path.contains('?') {
            return Err(format!("`path` {path:?} has a query; a rule's path is matched without it"));
        }
        if crate::paths::business_paths().any(|route| serves(route, path)) {
            return Ok(());
        }
        let routes: Vec<&str> = crate::paths::business_paths().collect();
        Err(format!(
            "no route serves `path` {path:?}, so the rule could never fire; the routes are {} \
             (name an id in place of `{{id}}`, e.g. /v1/tickets/ticket_1, or end a prefix with `*`, \
             e.g. /v1/tickets/*)",
            routes.join(", ")
        ))
    }

    /// The rule's JSON form (see [`FaultRule::from_json`]).
    pub fn to_json_value(&self) -> serde_json::Value {
        serde_json::to_value(RuleSpec::from(self)).expect("a rule always serialises")
    }

    pub(crate) fn selects(&self, request: &RequestFacts<'_>) -> bool {
        let m = &self.matches;
        m.method.as_deref().is_none_or(|method| method.eq_ignore_ascii_case(request.method))
            && m.path.as_deref().is_none_or(|pattern| path_selects(pattern, request.path))
            && m.tenant.as_deref().is_none_or(|tenant| Some(tenant) == request.tenant)
            && m.idempotency_key.as_deref().is_none_or(|key| Some(key) == request.idempotency_key)
    }
}

/// What a rule can be matched against.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RequestFacts<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub tenant: Option<&'a str>,
    pub idempotency_key: Option<&'a str>,
}

/// An installed rule with its counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstalledRule {
    /// Its id.
    pub id: FaultRuleId,
    /// The rule.
    pub rule: FaultRule,
    /// Requests that matched its fields so far.
    pub matched: u32,
    /// Times it fired so far.
    pub fired: u32,
    /// For `hold`: released (it holds nothing more and fires no more).
    pub released: bool,
}

impl InstalledRule {
    pub(crate) fn spent(&self) -> bool {
        self.released
            || match self.rule.times {
                Times::Count(limit) => self.fired >= limit,
                Times::Always => false,
            }
    }

    /// Counts `request` if it matches and says whether the rule fires on it.
    pub(crate) fn offer(&mut self, request: &RequestFacts<'_>) -> bool {
        if self.spent() || !self.rule.selects(request) {
            return false;
        }
        self.matched += 1;
        if self.matched < self.rule.matches.nth.unwrap_or(1) {
            return false;
        }
        self.fired += 1;
        true
    }

    /// The JSON form used by `GET /__admin/faults`.
    pub fn to_json_value(&self) -> serde_json::Value {
        serde_json::json!({
            "id": self.id,
            "rule": self.rule.to_json_value(),
            "matched": self.matched,
            "fired": self.fired,
            "released": self.released,
        })
    }
}

// ----------------------------------------------------------------------- file form

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleSpec {
    #[serde(rename = "match", default)]
    matches: RuleMatch,
    action: ActionName,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    delay: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    status: Option<u16>,
    #[serde(default = "times_once")]
    times: TimesSpec,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum ActionName {
    Hold,
    DropBeforeCommit,
    ResetBeforeCommit,
    CommitThenDrop,
    CommitThenDelay,
    CommitThenError,
    CommitThenMalformed,
    DelayBeforeCommit,
    RateLimited,
}

/// `times` as written: any number (checked in [`FaultRule::try_from`], so that `-1` gets a
/// plain message rather than the deserializer's), a word, or anything else (refused there too).
#[derive(Debug, Serialize, Deserialize)]
#[serde(untagged)]
enum TimesSpec {
    Count(i64),
    Word(String),
    Other(serde_json::Value),
}

fn times_once() -> TimesSpec {
    TimesSpec::Count(1)
}

impl TryFrom<RuleSpec> for FaultRule {
    type Error = String;

    fn try_from(spec: RuleSpec) -> Result<Self, String> {
        let delay = || -> Result<Duration, String> {
            let text = spec.delay.as_deref().ok_or("this action needs `delay` (e.g. \"3s\")")?;
            let delay = humantime::parse_duration(text)
                .map_err(|error| format!("invalid delay {text:?}: {error}"))?;
            if delay > MAX_FAULT_DELAY {
                return Err(format!("delay {text:?} is longer than 24h, the most any duration may be"));
            }
            Ok(delay)
        };
        let takes_delay = matches!(
            spec.action,
            ActionName::CommitThenDelay | ActionName::DelayBeforeCommit | ActionName::RateLimited
        );
        if spec.delay.is_some() && !takes_delay {
            return Err("`delay` is only for commit_then_delay, delay_before_commit and rate_limited".into());
        }
        if spec.status.is_some() && !matches!(spec.action, ActionName::CommitThenError) {
            return Err("`status` is only for commit_then_error".into());
        }
        let action = match spec.action {
            ActionName::Hold => FaultAction::Hold,
            ActionName::DropBeforeCommit => FaultAction::DropBeforeCommit,
            ActionName::ResetBeforeCommit => FaultAction::ResetBeforeCommit,
            ActionName::CommitThenDrop => FaultAction::CommitThenDrop,
            ActionName::CommitThenDelay => FaultAction::CommitThenDelay(delay()?),
            ActionName::CommitThenError => {
                let status = spec.status.ok_or("commit_then_error needs `status` (500-599)")?;
                if !(500..=599).contains(&status) {
                    return Err(format!("commit_then_error needs a 5xx status, not {status}"));
                }
                FaultAction::CommitThenError(status)
            }
            ActionName::CommitThenMalformed => FaultAction::CommitThenMalformed,
            ActionName::DelayBeforeCommit => FaultAction::DelayBeforeCommit(delay()?),
            ActionName::RateLimited => {
                let wait =
                    delay().map_err(|_| "rate_limited needs `delay`, the Retry-After (e.g. \"2s\")")?;
                if wait.subsec_nanos() != 0 || wait.is_zero() {
                    return Err(
                        "rate_limited's `delay` is the Retry-After: whole seconds, at least 1s".into()
                    );
                }
                FaultAction::RateLimited(wait)
            }
        };
        let times = match spec.times {
            TimesSpec::Count(n) if n < 1 => return Err(format!("`times` must be at least 1, not {n}")),
            TimesSpec::Count(n) => Times::Count(
                u32::try_from(n).map_err(|_| format!("`times` must be at most {}, not {n}", u32::MAX))?,
            ),
            TimesSpec::Word(word) if word == "always" => Times::Always,
            TimesSpec::Word(word) if word == "once" => Times::Count(1),
            TimesSpec::Word(word) => {
                return Err(format!("`times` is a number, \"once\" or \"always\", not {word:?}"))
            }
            TimesSpec::Other(value) => {
                return Err(format!("`times` is a number, \"once\" or \"always\", not {value}"))
            }
        };
        if spec.matches.nth == Some(0) {
            return Err("`nth` counts from 1".into());
        }
        check_match(&spec.matches)?;
        Ok(FaultRule { matches: spec.matches, action, times })
    }
}

/// Refuses a `match` that names nothing: it would disturb every request, reads included.
fn check_match(matches: &RuleMatch) -> Result<(), String> {
    if *matches == RuleMatch::default() {
        return Err(
            "a rule with an empty `match` would disturb every request; name a method or a path".into()
        );
    }
    Ok(())
}

/// Whether a rule's or a pause point's `pattern` selects a request to `path` (its query
/// ignored): segment by segment, a `{name}` segment fitting any one non-empty segment
/// (`/repos/{owner}/{repo}/issues` selects `/repos/acme/support/issues`), or as a prefix
/// when it ends in `*` (`/v1/tickets/*`), the segments before the last whole.
pub fn path_selects(pattern: &str, path: &str) -> bool {
    let path = path.split('?').next().unwrap_or_default();
    if !pattern.contains('{') {
        return match pattern.strip_suffix('*') {
            Some(prefix) => path.starts_with(prefix),
            None => path == pattern,
        };
    }
    let segments: Vec<&str> = path.split('/').collect();
    let fits = |wanted: &str, segment: &str| {
        if is_placeholder(wanted) {
            !segment.is_empty()
        } else {
            wanted == segment
        }
    };
    match pattern.strip_suffix('*') {
        None => {
            let wanted: Vec<&str> = pattern.split('/').collect();
            wanted.len() == segments.len()
                && wanted.iter().zip(&segments).all(|(wanted, segment)| fits(wanted, segment))
        }
        Some(prefix) => {
            let wanted: Vec<&str> = prefix.split('/').collect();
            let (partial, whole) = wanted.split_last().expect("split yields at least one piece");
            whole.len() < segments.len()
                && whole.iter().zip(&segments).all(|(wanted, segment)| fits(wanted, segment))
                && segments[whole.len()].starts_with(partial)
        }
    }
}

/// Whether `pattern` (a rule's path: exact, or a prefix ending in `*`; a `{name}` segment in
/// it fits any one segment) can select a request to `route` (axum syntax: a `{name}` segment
/// stands for any one non-empty segment).
fn serves(route: &str, pattern: &str) -> bool {
    let route: Vec<&str> = route.split('/').collect();
    let fits = |wanted: &str, segment: &str| {
        if is_placeholder(segment) || is_placeholder(wanted) {
            !wanted.is_empty()
        } else {
            wanted == segment
        }
    };
    match pattern.strip_suffix('*') {
        None => {
            let wanted: Vec<&str> = pattern.split('/').collect();
            wanted.len() == route.len()
                && wanted.iter().zip(&route).all(|(wanted, segment)| fits(wanted, segment))
        }
        Some(prefix) => {
            // Whole segments must fit; the last, partial one must begin the route's segment
            // there (anything begins a placeholder).
            let wanted: Vec<&str> = prefix.split('/').collect();
            let (partial, whole) = wanted.split_last().expect("split yields at least one piece");
            whole.len() < route.len()
                && whole.iter().zip(&route).all(|(wanted, segment)| fits(wanted, segment))
                && {
                    let segment = route[whole.len()];
                    is_placeholder(segment) || segment.starts_with(partial)
                }
        }
    }
}

/// `{id}`: a route segment that stands for any one segment.
fn is_placeholder(segment: &str) -> bool {
    segment.len() > 2 && segment.starts_with('{') && segment.ends_with('}')
}

impl From<FaultRule> for RuleSpec {
    fn from(rule: FaultRule) -> Self {
        RuleSpec::from(&rule)
    }
}

impl From<&FaultRule> for RuleSpec {
    fn from(rule: &FaultRule) -> Self {
        let (action, delay, status) = match rule.action {
            FaultAction::Hold => (ActionName::Hold, None, None),
            FaultAction::DropBeforeCommit => (ActionName::DropBeforeCommit, None, None),
            FaultAction::ResetBeforeCommit => (ActionName::ResetBeforeCommit, None, None),
            FaultAction::CommitThenDrop => (ActionName::CommitThenDrop, None, None),
            FaultAction::CommitThenDelay(d) => (ActionName::CommitThenDelay, Some(d), None),
            FaultAction::CommitThenError(s) => (ActionName::CommitThenError, None, Some(s)),
            FaultAction::CommitThenMalformed => (ActionName::CommitThenMalformed, None, None),
            FaultAction::DelayBeforeCommit(d) => (ActionName::DelayBeforeCommit, Some(d), None),
            FaultAction::RateLimited(d) => (ActionName::RateLimited, Some(d), None),
        };
        RuleSpec {
            matches: rule.matches.clone(),
            action,
            delay: delay.map(|d| humantime::format_duration(d).to_string()),
            status,
            times: match rule.times {
                Times::Count(n) => TimesSpec::Count(i64::from(n)),
                Times::Always => TimesSpec::Word("always".into()),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts<'a>(path: &'a str, key: Option<&'a str>) -> RequestFacts<'a> {
        RequestFacts { method: "POST", path, tenant: Some("acme"), idempotency_key: key }
    }

    #[test]
    fn parses_the_documented_example() {
        let rule = FaultRule::from_json(
            br#"{"match": {"path": "/v1/tickets", "idempotency_key": "k3"}, "action": "commit_then_drop", "times": 1}"#,
        )
        .unwrap();
        assert_eq!(rule.action, FaultAction::CommitThenDrop);
        assert_eq!(rule.times, Times::Count(1));
        assert!(rule.selects(&facts("/v1/tickets", Some("k3"))));
        assert!(!rule.selects(&facts("/v1/tickets", Some("k4"))));
        assert!(!rule.selects(&facts("/v1/charges", Some("k3"))));
    }

    #[test]
    fn round_trips_through_json() {
        for text in [
            r#"{"match":{"method":"POST","path":"/v1/*","nth":2},"action":"commit_then_delay","delay":"3s","times":"always"}"#,
            r#"{"match":{"tenant":"acme"},"action":"commit_then_error","status":503,"times":2}"#,
            r#"{"match":{"nth":3},"action":"hold","times":1}"#,
        ] {
            let rule = FaultRule::from_json(text.as_bytes()).unwrap();
            let again = FaultRule::from_json(rule.to_json_value().to_string().as_bytes()).unwrap();
            assert_eq!(rule, again, "{text}");
        }
    }

    #[test]
    fn refuses_bad_rules_with_a_reason() {
        let check = |text: &str, expected: &str| {
            let error = FaultRule::from_json(text.as_bytes()).unwrap_err();
            assert!(error.contains(expected), "{text}: {error}");
        };
        check(r#"{"action":"commit_then_delay"}"#, "needs `delay`");
        check(r#"{"action":"commit_then_delay","delay":"25h"}"#, "longer than 24h");
        check(r#"{"action":"delay_before_commit","delay":"100000000000s"}"#, "longer than 24h");
        check(r#"{"action":"commit_then_error","status":404}"#, "5xx");
        check(r#"{"action":"hold","delay":"1s"}"#, "only for");
        check(r#"{"action":"explode"}"#, "unknown variant");
        check(r#"{"action":"hold","times":0}"#, "at least 1");
        check(r#"{"action":"hold","times":"often"}"#, "always");
        check(r#"{"action":"hold","times":-1}"#, "`times` must be at least 1, not -1");
        check(r#"{"action":"hold","times":4294967296}"#, "at most 4294967295");
        check(r#"{"action":"hold","times":1.5}"#, "`times` is a number, \"once\" or \"always\", not 1.5");
        check(r#"{"action":"hold","times":[1]}"#, "not [1]");
        check(r#"{"action":"hold","match":{"colour":"red"}}"#, "unknown field");
        check(r#"{"action":"hold","match":{"nth":0}}"#, "from 1");
    }

    #[test]
    fn refuses_an_empty_match() {
        for text in [r#"{"action":"hold"}"#, r#"{"match":{},"action":"commit_then_drop","times":"always"}"#] {
            let error = FaultRule::from_json(text.as_bytes()).unwrap_err();
            assert_eq!(
                error, "a rule with an empty `match` would disturb every request; name a method or a path",
                "{text}"
            );
        }
        // Any one field is enough: the rule then says what it is about.
        for matches in [
            r#"{"method":"POST"}"#,
            r#"{"path":"/v1/charges"}"#,
            r#"{"tenant":"acme"}"#,
            r#"{"idempotency_key":"k1"}"#,
            r#"{"nth":2}"#,
        ] {
            let text = format!(r#"{{"match":{matches},"action":"hold"}}"#);
            assert!(FaultRule::from_json(text.as_bytes()).is_ok(), "{text}");
        }
    }

    #[test]
    fn refuses_a_path_no_route_serves() {
        let parse = |path: &str| {
            FaultRule::from_json(format!(r#"{{"match":{{"path":{path:?}}},"action":"hold"}}"#).as_bytes())
        };
        for path in [
            "/v1/tickets",
            "/v1/tickets/ticket_1",
            "/v1/tickets/*",
            "/v1/tickets*",
            "/v1/tick*",
            "/v1/*",
            "/*",
            "*",
            "/v1/charges",
            "/v1/messages",
            "/v1/jobs",
            "/v1/jobs/job_3",
            "/v1/receipts/k1",
            "/v1/receipts/*",
        ] {
            assert!(parse(path).is_ok(), "{path}: {:?}", parse(path));
        }
        for path in [
            "/v1/ticket",
            "/v1/tickets/",
            "/v1/tickets//",
            "/v1/tickets/ticket_1/close",
            "/v1/tickets/ticket_1/*",
            "/v1/charges/charge_1/capture",
            "/v1/messages/*",
            "/v1/receipts",
            "/v2/*",
            "/__admin/ledger",
            "/__admin/*",
            "v1/tickets",
            "",
        ] {
            let error = parse(path).unwrap_err();
            assert!(error.starts_with(&format!("no route serves `path` {path:?}")), "{path}: {error}");
            assert!(error.contains("/v1/tickets, /v1/tickets/{id}, /v1/charges"), "{error}");
        }
        let error = parse("/v1/receipts/k1?tenant=acme").unwrap_err();
        assert!(error.contains("has a query"), "{error}");
        // A `{name}` segment fits any one segment, in the check as in matching.
        let rule = parse("/v1/tickets/{id}").unwrap();
        assert!(rule.selects(&facts("/v1/tickets/ticket_9", None)));
        assert!(!rule.selects(&facts("/v1/tickets", None)));
        assert!(!rule.selects(&facts("/v1/tickets/ticket_9/x", None)));
        assert!(parse("/v1/tickets/{id}/close").is_err());
        // A scenario file's rule is deserialized without the check (its premise says when it
        // never fired); an empty match is refused there too.
        let rule: FaultRule =
            serde_json::from_str(r#"{"match":{"path":"/v1/chargez"},"action":"hold"}"#).unwrap();
        assert!(rule.check_path().is_err());
        assert!(serde_json::from_str::<FaultRule>(r#"{"action":"hold"}"#)
            .unwrap_err()
            .to_string()
            .contains("empty"));
    }

    #[test]
    fn nth_and_times_count_matching_requests() {
        let mut rule = InstalledRule {
            id: 1,
            rule: FaultRule {
                matches: RuleMatch { path: Some("/v1/tickets".into()), nth: Some(2), ..RuleMatch::default() },
                action: FaultAction::CommitThenDrop,
                times: Times::Count(2),
            },
            matched: 0,
            fired: 0,
            released: false,
        };
        let fired: Vec<bool> = ["/v1/tickets", "/v1/charges", "/v1/tickets", "/v1/tickets", "/v1/tickets"]
            .iter()
            .map(|path| rule.offer(&facts(path, None)))
            .collect();
        assert_eq!(fired, [false, false, true, true, false]);
        assert!(rule.spent());
    }
}
