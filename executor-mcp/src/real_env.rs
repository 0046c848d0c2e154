//! The real world's [`WorkerEnv`]: what an executor running as its own process uses to reach
//! the fake downstream on a real port, with real time. It is the environment `replaylab
//! executor serve` will give the reference (and the one `docs/mcp.md` describes to executors in
//! other languages: the downstream's URL, its authorizer, a state directory that survives
//! crashes).
//!
//! - downstream: [`wire::HttpClient`] over TCP to the downstream's business API;
//! - clock: the system's;
//! - authorizer: `GET /v1/authz?actor=..&tool=..` on the downstream ([`HttpAuthorizer`]);
//! - outbox: the harness's queue over HTTP ([`HttpOutbox`], [`protocol::mcp::env::QUEUE_URL`]),
//!   or none ([`NoOutbox`] refuses) when the world has no queue;
//! - reconciliations: JSON lines appended to `reconciliations.jsonl` in the state directory;
//! - store gate: nothing (there is no simulated time to spend, and real crashes are real);
//! - entropy: the operating system's;
//! - background: `tokio::task::spawn_local` and `tokio::time::sleep` (run it in a `LocalSet`).
//!
//! Must be used inside a tokio runtime with a [`tokio::task::LocalSet`].

use std::io::Write;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use executor::downstream::percent_encode;
use protocol::{
    AuthDecision, AuthRequest, Authorizer, Background, ContractSet, Entropy, Envelope, LocalBoxFuture,
    Outbox, OutboxError, ReconciliationEntry, Reconciliations, StoreGate, WorkerEnv,
};
use wire::{HttpClient, HttpRequest, SystemClock, TcpConnector};

/// Where a real worker finds its world.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RealWorld {
    /// The worker's name.
    pub worker: String,
    /// How many times it was started before.
    pub incarnation: u32,
    /// The downstream's business API: host and port on loopback.
    pub downstream: (String, u16),
    /// The directory for durable state (reconciliations are appended there when there is no
    /// operators' queue to post them to).
    pub state_dir: PathBuf,
    /// The operators' queue ([`protocol::mcp::env::OPERATORS_URL`]), if any.
    pub operators: Option<HttpTarget>,
    /// The queue's outbox ([`protocol::mcp::env::QUEUE_URL`]), if any.
    pub queue: Option<HttpTarget>,
}

/// `http://HOST:PORT/PATH`, split.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpTarget {
    /// Host.
    pub host: String,
    /// Port.
    pub port: u16,
    /// Path, from its `/`.
    pub path: String,
}

impl HttpTarget {
    /// Parses `http://HOST:PORT/PATH` (no user, no query); `None` for anything else.
    pub fn parse(url: &str) -> Option<HttpTarget> {
        let rest = url.strip_prefix("http://")?;
        let (authority, path) =
            rest.split_once('/').map_or((rest, "/".to_owned()), |(a, p)| (a, format!("/{p}")));
        let (host, port) = authority.rsplit_once(':')?;
        if host.is_empty() || host.contains('@') || path.contains('?') {
            return None;
        }
        Some(HttpTarget { host: host.to_owned(), port: port.parse().ok()?, path })
    }
}

impl RealWorld {
    /// The environment for an executor in this world.
    pub fn worker_env(&self) -> WorkerEnv {
        let (host, port) = &self.downstream;
        let client = HttpClient::new(Arc::new(TcpConnector), host, *port);
        WorkerEnv {
            worker_id: self.worker.clone(),
            incarnation: self.incarnation,
            downstream: Rc::new(client.clone()),
            clock: Arc::new(SystemClock),
            authorizer: Rc::new(HttpAuthorizer { client }),
            outbox: match &self.queue {
                Some(target) => Rc::new(HttpOutbox {
                    client: HttpClient::new(Arc::new(TcpConnector), &target.host, target.port),
                    path: target.path.clone(),
                }),
                None => Rc::new(NoOutbox),
            },
            reconciliations: match &self.operators {
                Some(target) => Rc::new(HttpReconciliations {
                    client: HttpClient::new(Arc::new(TcpConnector), &target.host, target.port),
                    path: target.path.clone(),
                    fallback: FileReconciliations { path: self.state_dir.join("reconciliations.jsonl") },
                }),
                None => Rc::new(FileReconciliations { path: self.state_dir.join("reconciliations.jsonl") }),
            },
            store_gate: Rc::new(NoGate),
            entropy: Rc::new(OsEntropy),
            background: Rc::new(TokioBackground),
            contracts: Arc::new(ContractSet::builtin()),
        }
    }
}

/// Asks the downstream's authorizer. An authorizer that cannot be reached denies: an effect
/// must never pass on a permission nobody confirmed.
#[derive(Debug)]
pub struct HttpAuthorizer {
    client: HttpClient,
}

impl Authorizer for HttpAuthorizer {
    fn authorize(&self, request: AuthRequest) -> LocalBoxFuture<'_, AuthDecision> {
        Box::pin(async move {
            let path = format!(
                "/v1/authz?actor={}&tool={}",
                percent_encode(&request.actor),
                percent_encode(&request.tool)
            );
            let answer = self.client.send(HttpRequest::get(path)).await;
            let decision = match answer {
                Ok(response) if response.status == 200 => {
                    response.json::<serde_json::Value>().ok().and_then(|body| body["allowed"].as_bool())
                }
                _ => None,
            };
            match decision {
                Some(true) => AuthDecision { allowed: true, reason: "permitted".into() },
                Some(false) => AuthDecision { allowed: false, reason: "permission revoked".into() },
                None => AuthDecision { allowed: false, reason: "the authorizer could not be asked".into() },
            }
        })
    }
}

/// No queue: a queued tool is refused at its enqueue.
#[derive(Debug)]
pub struct NoOutbox;

impl Outbox for NoOutbox {
    fn enqueue(&self, _: Envelope) -> LocalBoxFuture<'_, Result<(), OutboxError>> {
        Box::pin(async { Err(OutboxError("no queue in this world".into())) })
    }
}

/// The queue's outbox over HTTP: each envelope `POST`ed as JSON; anything but a `2xx` is an
/// error (the executor then does not answer as if it were queued).
#[derive(Debug)]
pub struct HttpOutbox {
    client: HttpClient,
    path: String,
}

impl Outbox for HttpOutbox {
    fn enqueue(&self, envelope: Envelope) -> LocalBoxFuture<'_, Result<(), OutboxError>> {
        Box::pin(async move {
            let request = HttpRequest::json(http::Method::POST, self.path.clone(), &envelope);
            match self.client.send(request).await {
                Ok(response) if (200..300).contains(&response.status) => Ok(()),
                Ok(response) => Err(OutboxError(format!("the queue answered {}", response.status))),
                Err(error) => Err(OutboxError(format!("the queue could not be reached: {error}"))),
            }
        })
    }
}

/// The operators' queue as a file of JSON lines.
#[derive(Debug)]
pub struct FileReconciliations {
    path: PathBuf,
}

impl Reconciliations for FileReconciliations {
    fn file(&self, entry: ReconciliationEntry) -> LocalBoxFuture<'_, ()> {
        Box::pin(async move {
            let line = serde_json::json!({
                "tenant": entry.tenant,
                "operation_key": entry.operation_key,
                "finding": entry.finding,
            });
            let written = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.path)
                .and_then(|mut file| writeln!(file, "{line}"));
            if let Err(error) = written {
                // Nowhere else to put it: the operators' queue is this file.
                tracing::error!(path = %self.path.display(), %error, "could not file a reconciliation entry");
            }
        })
    }
}

/// The operators' queue over HTTP: each entry `POST`ed as JSON; an entry the queue does not
/// take goes to the file instead, so that it is never lost.
#[derive(Debug)]
pub struct HttpReconciliations {
    client: HttpClient,
    path: String,
    fallback: FileReconciliations,
}

impl Reconciliations for HttpReconciliations {
    fn file(&self, entry: ReconciliationEntry) -> LocalBoxFuture<'_, ()> {
        Box::pin(async move {
            let body = serde_json::json!({
                "tenant": entry.tenant,
                "operation_key": entry.operation_key,
                "finding": entry.finding,
            });
            let sent =
                self.client.send(HttpRequest::json(http::Method::POST, self.path.clone(), &body)).await;
            if !matches!(&sent, Ok(response) if (200..300).contains(&response.status)) {
                tracing::warn!(path = %self.path, "the operators' queue did not take an entry; filing it in the state directory");
                self.fallback.file(entry).await;
            }
        })
    }
}

/// Store calls need no gate in the real world.
#[derive(Debug)]
pub struct NoGate;

impl StoreGate for NoGate {
    fn enter<'a>(&'a self, _: &'a str) -> LocalBoxFuture<'a, ()> {
        Box::pin(async {})
    }

    fn leave<'a>(&'a self, _: &'a str) -> LocalBoxFuture<'a, ()> {
        Box::pin(async {})
    }
}

/// Randomness from the operating system (through the standard library's hasher keys, which
/// it seeds from the OS for every new `RandomState`).
#[derive(Debug)]
pub struct OsEntropy;

impl Entropy for OsEntropy {
    fn next_u64(&self) -> u64 {
        use std::hash::{BuildHasher, Hasher};
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u64(0);
        hasher.finish()
    }
}

/// Background work on the current `LocalSet`, waiting by real time.
#[derive(Debug)]
pub struct TokioBackground;

impl Background for TokioBackground {
    fn spawn(&self, task: LocalBoxFuture<'static, ()>) {
        tokio::task::spawn_local(task);
    }

    fn sleep(&self, duration: Duration) -> LocalBoxFuture<'static, ()> {
        Box::pin(tokio::time::sleep(duration))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entropy_differs_from_draw_to_draw() {
        let draws: std::collections::BTreeSet<u64> = (0..16).map(|_| OsEntropy.next_u64()).collect();
        assert!(draws.len() > 1, "{draws:?}");
    }
}
