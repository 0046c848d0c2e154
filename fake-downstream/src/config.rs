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
    /// `http://host:port/path` to POST completion events to.
    pub url: String,
    /// Extra deliveries of the same event (same event id) after the first. 1 means twice.
    #[serde(default)]
    pub repeat_same_event: u32,
    /// Further deliveries of the same completion under new event ids.
    #[serde(default)]
    pub extra_event_ids: u32,
}

/// The whole configuration of a fake downstream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
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

impl DownstreamConfig {
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
