//! The boundary both worlds record at: the harness's own headers on downstream requests, and
//! what the history keeps of a request and an answer (its tenant, the effect references an
//! answer showed the executor, an operators' finding).

/// The header that tells a worker which labelled request it is serving (harness only).
pub const REQUEST_LABEL_HEADER: &str = "x-replaylab-request";
/// The header on downstream requests that names the operation a worker is serving.
pub const ORIGIN_HEADER: &str = "x-replaylab-origin";
/// The header on downstream requests that names the request itself (`worker-1#7`).
pub const REQUEST_ID_HEADER: &str = "x-replaylab-request-id";

/// The tenant a downstream request names: its body's `tenant`, or its `tenant` query.
pub fn tenant_in(path: &str, body: &[u8]) -> Option<String> {
    let from_body = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|body| body.get("tenant").and_then(|tenant| tenant.as_str()).map(str::to_owned));
    from_body.or_else(|| {
        let query = path.split_once('?')?.1;
        query.split('&').find_map(|pair| pair.strip_prefix("tenant=")).map(str::to_owned)
    })
}

/// Effect references an answer with `status` and `body` carries (a 2xx only).
pub fn references_in_answer(status: u16, body: &[u8]) -> Vec<String> {
    if !(200..300).contains(&status) {
        return Vec::new();
    }
    let Ok(body) = serde_json::from_slice::<serde_json::Value>(body) else { return Vec::new() };
    ["ticket_id", "charge_id", "message_id", "job_id", "effect_reference"]
        .iter()
        .filter_map(|field| body.get(*field).and_then(|value| value.as_str()).map(str::to_owned))
        .collect()
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
