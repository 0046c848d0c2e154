//! Serving an axum `Router` on any stream acceptor, with a per-connection kill switch.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::{Body, Frame, Incoming, SizeHint};

use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::sync::Notify;
use tower::ServiceExt;

use crate::client::Io;

/// Accepts incoming byte streams: a real or a simulated TCP listener.
pub trait Accept: Send + 'static {
    /// The stream type of an accepted connection.
    type Stream: Io;
    /// Waits for the next connection.
    fn accept(&mut self) -> impl Future<Output = std::io::Result<(Self::Stream, SocketAddr)>> + Send;
}

/// Accepts connections on a real TCP listener.
#[derive(Debug)]
pub struct TcpAcceptor(pub tokio::net::TcpListener);

impl Accept for TcpAcceptor {
    type Stream = tokio::net::TcpStream;
    async fn accept(&mut self) -> std::io::Result<(Self::Stream, SocketAddr)> {
        let (stream, peer) = self.0.accept().await?;
        stream.set_nodelay(true)?;
        Ok((stream, peer))
    }
}

/// Lets a request handler close its own connection without answering. Every request served
/// by [`serve`] carries one in its extensions (`Extension<ConnectionControl>` in axum).
#[derive(Debug, Clone, Default)]
pub struct ConnectionControl {
    close: Arc<Notify>,
}

impl ConnectionControl {
    /// Closes the connection now: whatever the handler would still answer is never sent, and
    /// the peer sees the connection end without a response.
    pub fn close(&self) {
        self.close.notify_one();
    }

    /// Waits until a handler calls [`ConnectionControl::close`] (for a server that serves
    /// connections itself, as [`serve_connection`] does). One waiter per connection.
    pub async fn closed(&self) {
        self.close.notified().await;
    }
}

/// Serves `router` on every connection `listener` accepts, until accepting fails.
/// Each connection runs in its own task on the current runtime.
pub async fn serve<A: Accept>(mut listener: A, router: axum::Router) -> std::io::Result<()> {
    loop {
        let (stream, _peer) = listener.accept().await?;
        tokio::spawn(serve_connection(stream, router.clone()));
    }
}

/// The most of a request body a connection reads and throws away after the answer, when the
/// handler answered without reading it (a 404, a 405, a refusal): closing while the client
/// is still sending would make its TCP stack drop the answer it was about to read.
const DRAIN_LIMIT: u64 = 1 << 20;
/// How long that reading may take.
const DRAIN_TIME: Duration = Duration::from_secs(1);

/// A request body the handler reads through, while the connection keeps a handle on what is
/// left of it (see [`drain`]).
struct SharedBody(Arc<Mutex<Incoming>>);

fn locked(body: &Mutex<Incoming>) -> std::sync::MutexGuard<'_, Incoming> {
    body.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Body for SharedBody {
    type Data = bytes::Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut *locked(&self.0)).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        locked(&self.0).is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        locked(&self.0).size_hint()
    }
}

/// Reads and drops what the handler left of the request body: at most [`DRAIN_LIMIT`] bytes
/// (none when more is announced) within [`DRAIN_TIME`].
async fn drain(body: &Mutex<Incoming>) {
    {
        let body = locked(body);
        if body.is_end_stream() || body.size_hint().lower() > DRAIN_LIMIT {
            return;
        }
    }
    let mut read: u64 = 0;
    let reading = async {
        while read <= DRAIN_LIMIT {
            match std::future::poll_fn(|cx| Pin::new(&mut *locked(body)).poll_frame(cx)).await {
                Some(Ok(frame)) => {
                    read += frame.data_ref().map_or(0, |data| data.len() as u64);
                }
                Some(Err(_)) | None => return,
            }
        }
    };
    let _ = tokio::time::timeout(DRAIN_TIME, reading).await;
}

/// Serves `router` on one connection until the peer closes it or a handler calls
/// [`ConnectionControl::close`].
pub async fn serve_connection<S: Io>(stream: S, router: axum::Router) {
    let control = ConnectionControl::default();
    let per_request = control.clone();
    let service = tower::service_fn(move |request: http::Request<Incoming>| {
        let (router, per_request) = (router.clone(), per_request.clone());
        async move {
            let (mut parts, body) = request.into_parts();
            parts.extensions.insert(per_request);
            let body = Arc::new(Mutex::new(body));
            let request = http::Request::from_parts(parts, axum::body::Body::new(SharedBody(body.clone())));
            let response = router.oneshot(request).await;
            drain(&body).await;
            response
        }
    });
    let connection = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
    // `biased`: the close signal wins over a response that is ready in the same poll, so a
    // handler that closed its connection never has its answer sent.
    tokio::select! {
        biased;
        () = control.close.notified() => {}
        _ = connection => {}
    }
}
