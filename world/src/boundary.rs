//! The boundary both worlds record at: the harness's own headers on downstream requests, and
//! what the history keeps of a request and an answer (its tenant, the effect references an
//! answer showed the executor, an operators' finding).

/// The header that tells a worker which labelled request it is serving (harness only).
pub const REQUEST_LABEL_HEADER: &str = "x-replaylab-request";
/// The header on downstream requests that names the operation a worker is serving.
pub const ORIGIN_HEADER: &str = "x-replaylab-origin";
/// The header on downstream requests that names the request itself (`worker-1#7`).
pub const REQUEST_ID_HEADER: &str = "x-replaylab-request-id";

/// The tenant a downstream request names, in whatever dialect it is written
/// ([`fake_downstream::request_tenant`]: a Stripe secret key in `authorization`, else its
/// body's `tenant`, else its `tenant` query).
pub fn tenant_in(path: &str, authorization: Option<&str>, body: &[u8]) -> Option<String> {
    fake_downstream::request_tenant(path, authorization, body)
}

/// Effect references an answer with `status` and `body` carries (a 2xx only), in whatever
/// dialect ([`fake_downstream::answer_references`]).
pub fn references_in_answer(status: u16, body: &[u8]) -> Vec<String> {
    fake_downstream::answer_references(status, body)
}

/// How much of a finding the history keeps: enough to read, bounded whatever an executor writes.
const MAX_FINDING_CHARS: usize = 300;

/// A finding as the history keeps it: at most [`MAX_FINDING_CHARS`] characters.
pub fn bounded_finding(mut finding: String) -> String {
    if let Some((cut, _)) = finding.char_indices().nth(MAX_FINDING_CHARS) {
        finding.truncate(cut);
        finding.push_str("...");
    }
    finding
}
