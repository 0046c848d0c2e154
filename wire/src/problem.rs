//! `application/problem+json` answers (RFC 9457).

use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

/// An error answer: HTTP status, a short machine-readable `type` slug, and a sentence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Problem {
    /// A short identifier of the kind of problem, e.g. `invalid_json`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The HTTP status, repeated in the body as RFC 9457 suggests.
    pub status: u16,
    /// What went wrong, in one sentence.
    pub detail: String,
}

impl Problem {
    /// A problem with status `status`, slug `kind` and explanation `detail`.
    pub fn new(status: u16, kind: impl Into<String>, detail: impl Into<String>) -> Self {
        Self { kind: kind.into(), status, detail: detail.into() }
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let status =
            http::StatusCode::from_u16(self.status).unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::to_vec(&self).expect("serialising a problem cannot fail");
        (status, [(http::header::CONTENT_TYPE, "application/problem+json")], body).into_response()
    }
}
