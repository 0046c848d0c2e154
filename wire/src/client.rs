//! A one-request-per-connection HTTP/1.1 client over any byte stream.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::MAX_BODY_BYTES;

/// A bidirectional byte stream: a real or a simulated TCP connection.
pub trait Io: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Io for T {}

/// The future returned by [`Connect::connect`].
pub type ConnectFuture = Pin<Box<dyn Future<Output = std::io::Result<Box<dyn Io>>> + Send>>;

/// Opens byte streams to `host:port`. Implemented for real sockets ([`TcpConnector`]) and,
/// with the `turmoil` feature, for simulated ones.
pub trait Connect: Send + Sync + 'static {
    /// Opens a new connection to `host:port`.
    fn connect(&self, host: &str, port: u16) -> ConnectFuture;
}

/// Connects over the operating system's TCP stack.
#[derive(Debug, Clone, Copy, Default)]
pub struct TcpConnector;

impl Connect for TcpConnector {
    fn connect(&self, host: &str, port: u16) -> ConnectFuture {
        let address = format!("{host}:{port}");
        Box::pin(async move {
            let stream = tokio::net::TcpStream::connect(address).await?;
            stream.set_nodelay(true)?;
            Ok(Box::new(stream) as Box<dyn Io>)
        })
    }
}

/// One HTTP request, fully buffered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpRequest {
    /// `GET`, `POST`, `PATCH`, ...
    pub method: http::Method,
    /// Path and query, starting with `/`.
    pub path: String,
    /// Extra headers, in the order they are sent.
    pub headers: Vec<(String, String)>,
    /// The body (empty for none).
    pub body: Bytes,
}

impl HttpRequest {
    /// A request without headers or body.
    pub fn new(method: http::Method, path: impl Into<String>) -> Self {
        Self { method, path: path.into(), headers: Vec::new(), body: Bytes::new() }
    }

    /// A `GET` request.
    pub fn get(path: impl Into<String>) -> Self {
        Self::new(http::Method::GET, path)
    }

    /// A request whose body is `value` as JSON.
    pub fn json(method: http::Method, path: impl Into<String>, value: &impl serde::Serialize) -> Self {
        let body = serde_json::to_vec(value).expect("serialising a value to JSON cannot fail");
        Self::new(method, path).header("content-type", "application/json").body(body)
    }

    /// Adds a header.
    #[must_use]
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Replaces the body.
    #[must_use]
    pub fn body(mut self, body: impl Into<Bytes>) -> Self {
        self.body = body.into();
        self
    }
}

/// One HTTP response, fully buffered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpResponse {
    /// The status code.
    pub status: u16,
    /// Headers, lower-case names, in the order received.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Bytes,
}

impl HttpResponse {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// The body parsed as JSON.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_slice(&self.body)
    }
}

/// Why no complete response was received. None of these says whether the server acted on
/// the request: callers must treat every variant after a sent request as an unknown outcome.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// The connection could not be opened.
    #[error("failed to connect to {address}: {source}")]
    Connect {
        /// `host:port`.
        address: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The connection closed (or was reset) before a complete response arrived.
    #[error("connection closed before a complete response: {0}")]
    ClosedWithoutResponse(String),
    /// The response body was longer than [`MAX_BODY_BYTES`].
    #[error("response body longer than {MAX_BODY_BYTES} bytes")]
    BodyTooLarge,
    /// The request could not be built (bad path or header).
    #[error("invalid request: {0}")]
    InvalidRequest(String),
}

/// Sends requests to one `host:port`, one connection per request.
#[derive(Clone)]
pub struct HttpClient {
    connector: Arc<dyn Connect>,
    host: String,
    port: u16,
}

impl std::fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpClient").field("host", &self.host).field("port", &self.port).finish()
    }
}

impl HttpClient {
    /// A client for `host:port` that opens connections with `connector`.
    pub fn new(connector: Arc<dyn Connect>, host: impl Into<String>, port: u16) -> Self {
        Self { connector, host: host.into(), port }
    }

    /// The `host:port` this client talks to.
    pub fn authority(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    /// Sends `request` on a new connection and reads the whole response. There is no
    /// timeout here: wrap the call in `tokio::time::timeout` (simulated time in a simulation).
    pub async fn send(&self, request: HttpRequest) -> Result<HttpResponse, TransportError> {
        let mut builder = http::Request::builder()
            .method(request.method)
            .uri(request.path)
            .header(http::header::HOST, self.authority());
        for (name, value) in &request.headers {
            builder = builder.header(name.as_str(), value.as_str());
        }
        let hyper_request = builder
            .body(Full::new(request.body))
            .map_err(|error| TransportError::InvalidRequest(error.to_string()))?;

        let io = self
            .connector
            .connect(&self.host, self.port)
            .await
            .map_err(|source| TransportError::Connect { address: self.authority(), source })?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io))
            .await
            .map_err(|error| TransportError::ClosedWithoutResponse(error.to_string()))?;
        // The connection task ends when the response is read or the peer goes away; it lives
        // on the caller's runtime (a simulated host's runtime inside turmoil).
        tokio::spawn(async move {
            let _ = connection.await;
        });
        let response = sender
            .send_request(hyper_request)
            .await
            .map_err(|error| TransportError::ClosedWithoutResponse(error.to_string()))?;
        let status = response.status().as_u16();
        let headers = response
            .headers()
            .iter()
            .map(|(name, value)| {
                (name.as_str().to_owned(), String::from_utf8_lossy(value.as_bytes()).into_owned())
            })
            .collect();
        let body = Limited::new(response.into_body(), MAX_BODY_BYTES)
            .collect()
            .await
            .map_err(|error| {
                if error.is::<http_body_util::LengthLimitError>() {
                    TransportError::BodyTooLarge
                } else {
                    TransportError::ClosedWithoutResponse(error.to_string())
                }
            })?
            .to_bytes();
        Ok(HttpResponse { status, headers, body })
    }
}
