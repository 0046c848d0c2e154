//! The black-box world's per-tool MCP hints in words: what a tool declares in its
//! `tools/list`, what its results earned, and which declared hints they contradict.

use crate::model::{Hints, ToolHints};

/// One line per tool: `tool create_payment_intent (payments.charge): declares nothing; earned
/// readOnlyHint=false destructiveHint=false idempotentHint=true (...)`, with the hints the
/// results contradict named last.
pub fn hint_lines(hints: &[ToolHints]) -> Vec<String> {
    hints
        .iter()
        .map(|tool| {
            let contradicted = if tool.contradicted.is_empty() {
                String::new()
            } else {
                format!("; CONTRADICTED: {}", tool.contradicted.join(", "))
            };
            format!(
                "tool {} ({}): declares {}; earned {} ({}){contradicted}",
                tool.tool,
                tool.role,
                named(&tool.declared).unwrap_or_else(|| "no hint".into()),
                named(&tool.earned).unwrap_or_else(|| "nothing either way".into()),
                tool.evidence
            )
        })
        .collect()
}

/// `readOnlyHint=false destructiveHint=true`, the known hints only.
pub(crate) fn named(hints: &Hints) -> Option<String> {
    let known: Vec<String> = [
        ("readOnlyHint", hints.read_only),
        ("destructiveHint", hints.destructive),
        ("idempotentHint", hints.idempotent),
    ]
    .into_iter()
    .filter_map(|(name, value)| value.map(|value| format!("{name}={value}")))
    .collect();
    (!known.is_empty()).then(|| known.join(" "))
}
