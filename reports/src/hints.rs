//! The black-box world's per-tool MCP hints in words: what a tool declares in its
//! `tools/list`, what its results earned, and which declared hints they contradict.

use std::collections::BTreeMap;

use crate::model::{Hints, ToolHints};

impl ToolHints {
    /// The hints `tool` (playing `role`) declares and those its results earned: `repeated`
    /// operations delivered more than once, `duplicated` of them with more than one effect,
    /// `effects` by kind.
    /// - `idempotentHint`: false when an operation made a second effect; true when operations
    ///   were delivered again and none did; unknown otherwise;
    /// - `destructiveHint`: true when an effect updated (`ticket_status_changed`), false when
    ///   every effect only added; unknown without effects;
    /// - `readOnlyHint`: false once there is an effect.
    ///
    /// A declared `true` (`false` for `destructiveHint`) that the earned hint denies is
    /// contradicted; a hint not declared never is.
    pub fn new(
        role: &str,
        tool: &str,
        declared: Hints,
        repeated: u64,
        duplicated: u64,
        effects: BTreeMap<String, u64>,
    ) -> ToolHints {
        let made: u64 = effects.values().sum();
        let updates = effects.iter().any(|(kind, count)| *count > 0 && kind == "ticket_status_changed");
        let earned = Hints {
            read_only: (made > 0).then_some(false),
            destructive: (made > 0).then_some(updates),
            idempotent: if duplicated > 0 {
                Some(false)
            } else if repeated > 0 {
                Some(true)
            } else {
                None
            },
        };
        let mut contradicted = Vec::new();
        if declared.read_only == Some(true) && earned.read_only == Some(false) {
            contradicted.push("readOnlyHint".to_owned());
        }
        if declared.destructive == Some(false) && earned.destructive == Some(true) {
            contradicted.push("destructiveHint".to_owned());
        }
        if declared.idempotent == Some(true) && earned.idempotent == Some(false) {
            contradicted.push("idempotentHint".to_owned());
        }
        let kinds: Vec<String> = effects.iter().map(|(kind, count)| format!("{count} {kind}")).collect();
        let evidence = format!(
            "{repeated} operation{} delivered more than once, {duplicated} of them made more than one effect; effects: {}",
            if repeated == 1 { "" } else { "s" },
            if kinds.is_empty() { "none".to_owned() } else { kinds.join(", ") }
        );
        ToolHints {
            role: role.to_owned(),
            tool: tool.to_owned(),
            declared,
            repeated,
            duplicated,
            effects,
            earned,
            evidence,
            contradicted,
            scenarios: Vec::new(),
            vendor: None,
        }
    }

    /// The hints of shards of one matrix, joined: each role's counts summed, and what they
    /// earned derived again.
    pub fn merged<'a>(parts: impl IntoIterator<Item = &'a ToolHints>) -> Vec<ToolHints> {
        let mut by_role: BTreeMap<(String, String), ToolHints> = BTreeMap::new();
        for part in parts {
            let key = (part.role.clone(), part.tool.clone());
            let Some(sum) = by_role.get_mut(&key) else {
                by_role.insert(key, part.clone());
                continue;
            };
            sum.repeated += part.repeated;
            sum.duplicated += part.duplicated;
            for (kind, count) in &part.effects {
                *sum.effects.entry(kind.clone()).or_default() += count;
            }
            sum.scenarios.extend(part.scenarios.iter().cloned());
            sum.scenarios.sort();
            sum.scenarios.dedup();
            sum.vendor = sum.vendor.take().or_else(|| part.vendor.clone());
        }
        by_role
            .into_values()
            .map(|sum| ToolHints {
                scenarios: sum.scenarios.clone(),
                vendor: sum.vendor.clone(),
                ..ToolHints::new(
                    &sum.role,
                    &sum.tool,
                    sum.declared,
                    sum.repeated,
                    sum.duplicated,
                    sum.effects,
                )
            })
            .collect()
    }
}

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
            let vendor = match &tool.vendor {
                Some(vendor) if tool.scenarios.is_empty() => format!("; bound to {vendor}"),
                Some(vendor) => format!("; bound to {vendor} (scenarios: {})", tool.scenarios.join(", ")),
                None => String::new(),
            };
            format!(
                "tool {} ({}): declares {}; earned {} ({}){contradicted}{vendor}",
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

#[cfg(test)]
mod tests {
    use super::*;

    fn charges(count: u64) -> BTreeMap<String, u64> {
        BTreeMap::from([("charge_created".to_owned(), count)])
    }

    #[test]
    fn earned_hints_follow_the_counts_and_contradict_only_declared_claims() {
        let claims = Hints { read_only: None, destructive: Some(false), idempotent: Some(true) };
        let held = ToolHints::new("payments.charge", "charge", claims, 3, 0, charges(3));
        assert_eq!(
            held.earned,
            Hints { read_only: Some(false), destructive: Some(false), idempotent: Some(true) }
        );
        assert!(held.contradicted.is_empty(), "{held:?}");
        let broken = ToolHints::new("payments.charge", "charge", claims, 3, 1, charges(4));
        assert_eq!(broken.contradicted, ["idempotentHint"]);
        let update = BTreeMap::from([("ticket_status_changed".to_owned(), 1)]);
        let updating = ToolHints::new("tickets.set_status", "close", claims, 0, 0, update);
        assert_eq!((updating.earned.destructive, updating.earned.idempotent), (Some(true), None));
        assert_eq!(updating.contradicted, ["destructiveHint"]);
        // Nothing declared, nothing contradicted, whatever the results.
        assert!(ToolHints::new("payments.charge", "charge", Hints::default(), 3, 3, charges(6))
            .contradicted
            .is_empty());
        let read_only = Hints { read_only: Some(true), ..Hints::default() };
        assert_eq!(
            ToolHints::new("payments.charge", "c", read_only, 0, 0, charges(1)).contradicted,
            ["readOnlyHint"]
        );
    }

    #[test]
    fn shards_join_by_summing_their_counts() {
        let claims = Hints { idempotent: Some(true), ..Hints::default() };
        let a = ToolHints::new("payments.charge", "charge", claims, 2, 0, charges(2));
        let b = ToolHints::new("payments.charge", "charge", claims, 1, 1, charges(2));
        let joined = ToolHints::merged([&a, &b]);
        assert_eq!(joined.len(), 1);
        assert_eq!(
            (joined[0].repeated, joined[0].duplicated, joined[0].effects["charge_created"]),
            (3, 1, 4)
        );
        assert_eq!(joined[0].contradicted, ["idempotentHint"], "one shard's duplicate contradicts the whole");
    }

    #[test]
    fn a_tool_bound_to_a_twin_says_what_the_twin_does_with_keys_and_where_it_was_judged() {
        let note = "github POST /repos/{owner}/{repo}/issues: the github twin honours no idempotency key";
        let part = |scenario: &str| ToolHints {
            scenarios: vec![scenario.to_owned()],
            vendor: Some(note.to_owned()),
            ..ToolHints::new("tickets.create", "create_issue", Hints::default(), 1, 0, charges(1))
        };
        let joined = ToolHints::merged([&part("S33"), &part("S07"), &part("S33")]);
        assert_eq!(joined.len(), 1);
        assert_eq!(joined[0].scenarios, ["S07", "S33"]);
        let line = &hint_lines(&joined)[0];
        assert!(line.ends_with(&format!("; bound to {note} (scenarios: S07, S33)")), "{line}");
        let plain = ToolHints::new("tickets.create", "create_issue", Hints::default(), 1, 0, charges(1));
        assert!(!hint_lines(&[plain])[0].contains("bound to"));
    }
}
