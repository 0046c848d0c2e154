//! A handler that answers without reading a large request body: the client still gets the
//! answer. Found by `replaylab fuzz`: the server closed the connection while the client was
//! still sending, and the client lost the answer (there: `GET /__admin/requests` with a
//! 65,536-byte body). An in-memory connection with a 64 KiB buffer and an answer of some size
//! shows it every time; a loopback socket's larger buffers usually hide it.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;

/// Sends a POST of `size` bytes to `path` over one small in-memory connection; the status
/// and body, or why there was none.
async fn send(
    router: axum::Router,
    method: http::Method,
    path: &str,
    size: usize,
) -> Result<(u16, Bytes), String> {
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let server = wire::serve_connection(server_io, router);
    let client = async move {
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(client_io))
            .await
            .map_err(|e| e.to_string())?;
        let request = http::Request::builder()
            .method(method)
            .uri(path)
            .header("host", "test")
            .header("content-length", size.to_string())
            .body(Full::new(Bytes::from(vec![b'x'; size])))
            .unwrap();
        let talk = async move {
            let response = sender.send_request(request).await.map_err(|e| format!("no response: {e}"))?;
            let status = response.status().as_u16();
            let body = response.into_body().collect().await.map_err(|e| format!("no body: {e}"))?.to_bytes();
            Ok::<_, String>((status, body))
        };
        let (answer, _) = tokio::join!(talk, connection);
        answer
    };
    let (answer, ()) = tokio::join!(client, server);
    answer
}

#[tokio::test(flavor = "current_thread")]
async fn an_answer_given_without_reading_a_large_body_reaches_the_client() {
    let long_answer = "y".repeat(20_000);
    let router = axum::Router::new()
        .route("/ignores", axum::routing::get(move || async move { (http::StatusCode::OK, long_answer) }))
        .fallback(|| async { (http::StatusCode::NOT_FOUND, "no such route") });
    for (path, status) in [("/ignores", 200), ("/nowhere", 404)] {
        for size in [60_000, 65_536, 70_000, 512 * 1024] {
            let answer = send(router.clone(), http::Method::GET, path, size).await;
            let (got, body) = answer.unwrap_or_else(|error| panic!("{path}, {size} bytes: {error}"));
            assert_eq!(got, status, "{path}, {size} bytes: {body:?}");
        }
    }
}
