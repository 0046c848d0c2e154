//! How the fake service behaves: per-service idempotency and receipt support, job timing,
//! webhook delivery.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// One of the fake service's business services. Idempotency keys, receipts and fault
/// rules are scoped per service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Service {
    /// `POST /v1/tickets`, `PATCH /v1/tickets/{id}`.
    Tickets,
    /// `POST /v1/charges`.
    Charges,
    /// `POST /v1/messages`.
    Messages,
    /// `POST /v1/jobs`.
    Jobs,
}

impl Service {
    /// Every service, in a fixed order.
    pub const ALL: [Service; 4] = [Service::Tickets, Service::Charges, Service::Messages, Service::Jobs];

    /// The lower-case name used in URLs and files.
    pub fn as_str(self) -> &'static str {
        match self {
            Service::Tickets => "tickets",
            Service::Charges => "charges",
            Service::Messages => "messages",
            Service::Jobs => "jobs",
        }
    }

    /// Parses [`Service::as_str`]'s output.
    pub fn parse(name: &str) -> Option<Service> {
        Service::ALL.into_iter().find(|service| service.as_str() == name)
    }
}

/// What a service does with an `Idempotency-Key` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IdempotencyMode {
    /// A repeated key with the same request replays the first response
    /// (`Idempotent-Replayed: true`); with a different request it is answered 422; while
    /// the first request with the key is still being processed, 409.
    Honoured,
    /// The key is recorded in the ledger but every request is a new effect.
    Ignored,
}

/// The settings of one service.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceConfig {
    /// What the service does with idempotency keys.
    pub idempotency: IdempotencyMode,
    /// Whether `GET /v1/receipts/{key}?service=...` answers for this service (otherwise 501).
    pub receipts: bool,
}

impl Default for ServiceConfig {
    fn default() -> Self {
        Self { idempotency: IdempotencyMode::Honoured, receipts: true }
    }
}

/// Where and how job-completion webhooks are delivered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookConfig {
    /// `http://host:port/path` to POST completion events to (plain HTTP: the service has no
    /// TLS client).
    pub url: String,
    /// Extra deliveries of the same event (same event id) after the first. 1 means twice.
    #[serde(default)]
    pub repeat_same_event: u32,
    /// Further deliveries of the same completion under new event ids.
    #[serde(default)]
    pub extra_event_ids: u32,
}

/// The most extra deliveries of one completion a webhook config may ask for (of each kind):
/// every delivery of a finishing job is built at once, so a count in the billions would
/// exhaust memory; a hundred redeliveries already tests deduplication to the full.
pub const MAX_WEBHOOK_REPEATS: u32 = 100;

/// The longest `job_duration` accepted (as long as a scenario may run).
const MAX_JOB_DURATION: Duration = Duration::from_secs(24 * 60 * 60);

/// The whole configuration of a fake downstream. Deserializing checks it
/// ([`DownstreamConfig::validate`]), so a configuration file with a bad field is refused when
/// it is loaded, naming the field.
// `remote = "Self"` makes the derives inherent functions, called by the trait impls below
// (deserializing then validating).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(remote = "Self", deny_unknown_fields)]
pub struct DownstreamConfig {
    /// Ticket service settings.
    #[serde(default)]
    pub tickets: ServiceConfig,
    /// Payment service settings.
    #[serde(default)]
    pub charges: ServiceConfig,
    /// Message service settings.
    #[serde(default)]
    pub messages: ServiceConfig,
    /// Job service settings.
    #[serde(default)]
    pub jobs: ServiceConfig,
    /// How long an accepted job runs before it succeeds.
    #[serde(default = "default_job_duration", with = "humantime_serde")]
    pub job_duration: Duration,
    /// Completion webhooks; none are sent when absent.
    #[serde(default)]
    pub webhook: Option<WebhookConfig>,
}

fn default_job_duration() -> Duration {
    Duration::from_secs(2)
}

impl Default for DownstreamConfig {
    fn default() -> Self {
        Self {
            tickets: ServiceConfig::default(),
            charges: ServiceConfig::default(),
            messages: ServiceConfig::default(),
            jobs: ServiceConfig::default(),
            job_duration: default_job_duration(),
            webhook: None,
        }
    }
}

impl Serialize for DownstreamConfig {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        DownstreamConfig::serialize(self, serializer)
    }
}

impl<'de> Deserialize<'de> for DownstreamConfig {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let config = DownstreamConfig::deserialize(deserializer)?;
        config.validate().map_err(serde::de::Error::custom)?;
        Ok(config)
    }
}

impl DownstreamConfig {
    /// Checks what the types cannot: the webhook URL is an `http://host[:port]/path` URL the
    /// service can deliver to, and `job_duration` is at most 24 hours. The error names the field.
    /// A configuration built in process is not checked by [`crate::Downstream::new`]; one with a
    /// bad webhook URL delivers no webhooks.
    pub fn validate(&self) -> Result<(), String> {
        if self.job_duration > MAX_JOB_DURATION {
            return Err(format!(
                "`job_duration` must be at most 24h, not {}",
                humantime::format_duration(self.job_duration)
            ));
        }
        if let Some(webhook) = &self.webhook {
            for (name, count) in [
                ("repeat_same_event", webhook.repeat_same_event),
                ("extra_event_ids", webhook.extra_event_ids),
            ] {
                if count > MAX_WEBHOOK_REPEATS {
                    return Err(format!(
                        "`webhook.{name}` must be at most {MAX_WEBHOOK_REPEATS}, not {count}"
                    ));
                }
            }
            if split_url(&webhook.url).is_none() {
                return Err(format!(
                    "`webhook.url` must be a URL like http://host:port/path, not {:?}",
                    webhook.url
                ));
            }
        }
        Ok(())
    }

    /// The settings of `service`.
    pub fn service(&self, service: Service) -> ServiceConfig {
        match service {
            Service::Tickets => self.tickets,
            Service::Charges => self.charges,
            Service::Messages => self.messages,
            Service::Jobs => self.jobs,
        }
    }

    /// Changes the settings of `service`.
    pub fn set_service(&mut self, service: Service, config: ServiceConfig) {
        match service {
            Service::Tickets => self.tickets = config,
            Service::Charges => self.charges = config,
            Service::Messages => self.messages = config,
            Service::Jobs => self.jobs = config,
        }
    }
}

/// `http://host:port/path` -> (host, port, path). A loaded configuration's webhook URL was
/// checked with this ([`DownstreamConfig::validate`]); a bad one set in-process sends nothing.
pub(crate) fn split_url(url: &str) -> Option<(String, u16, String)> {
    let uri: http::Uri = url.parse().ok()?;
    if uri.scheme_str() != Some("http") {
        return None;
    }
    let host = uri.host().filter(|host| !host.is_empty())?.to_owned();
    let port = uri.port_u16().unwrap_or(80);
    let path = uri.path_and_query().map_or("/".to_owned(), |p| p.as_str().to_owned());
    Some((host, port, path))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<DownstreamConfig, String> {
        serde_json::from_str(text).map_err(|error| error.to_string())
    }

    #[test]
    fn a_bad_field_is_refused_when_loaded_and_named() {
        for (text, field) in [
            (r#"{"webhook": {"url": "not a url at all"}}"#, "`webhook.url`"),
            (r#"{"webhook": {"url": "https://hooks.example/done"}}"#, "`webhook.url`"),
            (r#"{"webhook": {"url": "worker-1:8081/v1/webhooks"}}"#, "`webhook.url`"),
            (r#"{"webhook": {"url": "http:///v1/webhooks"}}"#, "`webhook.url`"),
            (r#"{"job_duration": "25h"}"#, "`job_duration` must be at most 24h, not 1day 1h"),
            (
                r#"{"webhook": {"url": "http://w:1/h", "repeat_same_event": 4294967295}}"#,
                "`webhook.repeat_same_event` must be at most 100, not 4294967295",
            ),
            (
                r#"{"webhook": {"url": "http://w:1/h", "extra_event_ids": 101}}"#,
                "`webhook.extra_event_ids` must be at most 100, not 101",
            ),
        ] {
            let error = load(text).unwrap_err();
            assert!(error.contains(field), "{text}: {error}");
        }
        let error = load(r#"{"webhook": {"url": "not a url at all"}}"#).unwrap_err();
        assert!(error.contains("not \"not a url at all\""), "the value is quoted: {error}");
    }

    #[test]
    fn a_good_config_loads_and_round_trips() {
        let text = r#"{"tickets": {"idempotency": "ignored", "receipts": false}, "job_duration": "24h",
            "webhook": {"url": "http://worker-1:8081/v1/webhooks", "repeat_same_event": 1}}"#;
        let config = load(text).unwrap();
        assert_eq!(config.tickets.idempotency, IdempotencyMode::Ignored);
        assert_eq!(config.webhook.as_ref().map(|w| w.repeat_same_event), Some(1));
        let again = load(&serde_json::to_string(&config).unwrap()).unwrap();
        assert_eq!(config, again);
        assert_eq!(load("{}").unwrap(), DownstreamConfig::default());
        assert!(load(r#"{"colour": "red"}"#).unwrap_err().contains("unknown field"));
    }

    #[test]
    fn validate_checks_a_config_built_in_process() {
        let mut config = DownstreamConfig::default();
        assert_eq!(config.validate(), Ok(()));
        config.webhook =
            Some(WebhookConfig { url: "not a url at all".into(), repeat_same_event: 0, extra_event_ids: 0 });
        assert!(config.validate().unwrap_err().starts_with("`webhook.url`"));
    }
}
