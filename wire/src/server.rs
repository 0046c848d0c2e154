//! Serving an axum `Router` on any stream acceptor, with a per-connection kill switch.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

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
}

/// Serves `router` on every connection `listener` accepts, until accepting fails.
/// Each connection runs in its own task on the current runtime.
pub async fn serve<A: Accept>(mut listener: A, router: axum::Router) -> std::io::Result<()> {
    loop {
        let (stream, _peer) = listener.accept().await?;
        tokio::spawn(serve_connection(stream, router.clone()));
    }
}

/// Serves `router` on one connection until the peer closes it or a handler calls
/// [`ConnectionControl::close`].
pub async fn serve_connection<S: Io>(stream: S, router: axum::Router) {
    let control = ConnectionControl::default();
    let per_request = control.clone();
    let service = tower::service_fn(move |mut request: http::Request<hyper::body::Incoming>| {
        request.extensions_mut().insert(per_request.clone());
        router.clone().oneshot(request)
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
