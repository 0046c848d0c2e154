//! Adapters for turmoil's simulated sockets.

use std::net::SocketAddr;

use crate::client::{Connect, ConnectFuture, Io};
use crate::server::Accept;

/// Accepts connections on a simulated turmoil listener.
pub struct SimAcceptor(pub turmoil::net::TcpListener);

impl std::fmt::Debug for SimAcceptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("SimAcceptor").field(&self.0.local_addr().ok()).finish()
    }
}

impl Accept for SimAcceptor {
    type Stream = turmoil::net::TcpStream;
    async fn accept(&mut self) -> std::io::Result<(Self::Stream, SocketAddr)> {
        self.0.accept().await
    }
}

/// Connects over turmoil's simulated network (host names are simulated host names).
#[derive(Debug, Clone, Copy, Default)]
pub struct SimConnector;

impl Connect for SimConnector {
    fn connect(&self, host: &str, port: u16) -> ConnectFuture {
        let host = host.to_owned();
        Box::pin(async move {
            let stream = turmoil::net::TcpStream::connect((host.as_str(), port)).await?;
            Ok(Box::new(stream) as Box<dyn Io>)
        })
    }
}
