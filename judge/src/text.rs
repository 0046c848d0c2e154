//! Plain text for what people read (violations, notes, timeline labels, terminal output):
//! names in plain double quotes, options said in words, enums by their serialised names;
//! never Rust's `Debug` formatting (`Some(..)`, `None`, escaped characters, variant names).

use std::time::Duration;

use protocol::ReasonCode;

/// `text` in plain double quotes, nothing escaped: `"first"`, `"café"`.
///
/// ```
/// assert_eq!(judge::text::quoted("retry"), "\"retry\"");
/// assert_eq!(judge::text::quoted("café"), "\"café\"");
/// ```
pub fn quoted(text: &str) -> String {
    format!("\"{text}\"")
}

/// Each text [`quoted`], joined with `, `: `"first", "second"`.
pub fn quoted_all<S: AsRef<str>>(texts: &[S]) -> String {
    texts.iter().map(|text| quoted(text.as_ref())).collect::<Vec<_>>().join(", ")
}

/// An effect reference, or `no effect reference`.
pub fn effect_reference(reference: Option<&str>) -> &str {
    reference.unwrap_or("no effect reference")
}

/// A reason code by its serialised name (`precondition_failed`), or `no reason`.
pub fn reason(reason: Option<ReasonCode>) -> &'static str {
    reason.map_or("no reason", ReasonCode::as_str)
}

/// A duration as people write it: `30 s` for whole seconds, else `250 ms`.
pub fn duration(duration: Duration) -> String {
    if duration.subsec_nanos() == 0 {
        format!("{} s", duration.as_secs())
    } else {
        format!("{} ms", duration.as_millis())
    }
}

/// `text` as one word of a POSIX shell command line (for the commands that reproduce a run).
pub fn shell_quote(text: &str) -> String {
    if text.chars().all(|c| c.is_ascii_alphanumeric() || "/._-:@+=,%".contains(c)) {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', "'\\''"))
    }
}

/// The text of a panic's payload (an executor's panic, reported in a run's notes).
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-text panic".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_words_for_everything() {
        assert_eq!(quoted("a \"b\" \\ é"), "\"a \"b\" \\ é\"");
        assert_eq!(quoted_all(&["a", "b"]), "\"a\", \"b\"");
        assert_eq!(quoted_all::<&str>(&[]), "");
        assert_eq!(effect_reference(Some("charge_2")), "charge_2");
        assert_eq!(effect_reference(None), "no effect reference");
        assert_eq!(reason(Some(ReasonCode::PreconditionFailed)), "precondition_failed");
        assert_eq!(reason(None), "no reason");
        assert_eq!(duration(Duration::from_secs(30)), "30 s");
        assert_eq!(duration(Duration::from_millis(1500)), "1500 ms");
    }
}
