//! Target `case`: mutated exploration cases, parsed as `replaylab run --case` does, some run.

use std::collections::BTreeMap;
use std::time::Instant;

use fake_downstream::WebhookConfig;

use judge::verdict::Verdict;

use crate::downstream::webhook_fanout;
use crate::gen::*;
use crate::guard::*;
use crate::model::*;
use crate::scenario::step_text;

pub(crate) struct CaseFuzz {
    subject: CaseSubject,
    corpus: Vec<Vec<u8>>,
    parsed: u64,
    runs: u64,
    verdicts: BTreeMap<&'static str, u64>,
    /// Failed runs by the oracles that failed (beside scenario expectations, which mutated
    /// cases often break): for triage, not a property.
    oracles: BTreeMap<String, u64>,
    /// Runs that failed a scenario expectation (`expect`): a mutated case often asks the
    /// reference for what it should not do, so these are no finding, but a `fail` they explain.
    unmet_expectations: u64,
    slowest: f64,
}

impl CaseFuzz {
    pub(crate) fn new(subject: CaseSubject) -> Self {
        let corpus = (0..CASE_CORPUS)
            .map(|seed| {
                let case = explore::case_for_seed(seed * 7919);
                format!(
                    "# Found by `replaylab explore` at seed {}.\n{}",
                    case.seed,
                    case.to_scenario().to_toml()
                )
                .into_bytes()
            })
            .collect();
        Self {
            subject,
            corpus,
            parsed: 0,
            runs: 0,
            verdicts: BTreeMap::new(),
            oracles: BTreeMap::new(),
            unmet_expectations: 0,
            slowest: 0.0,
        }
    }
}

impl Fuzz for CaseFuzz {
    type Input = String;

    fn generate(&mut self, gen: &mut Gen, _n: u64) -> String {
        let base = &self.corpus[gen.below(self.corpus.len())];
        let mut bytes = match gen.below(10) {
            0 => base.clone(),
            1..=2 => {
                // Structured: another seed, another step from a fresh generator.
                let mut text = String::from_utf8_lossy(base).into_owned();
                if gen.chance(50) {
                    text = text
                        .lines()
                        .map(|line| {
                            if line.starts_with("seed = ") {
                                format!("seed = {}", gen.pick(NUMBERS))
                            } else {
                                line.to_owned()
                            }
                        })
                        .collect::<Vec<_>>()
                        .join("\n");
                }
                text.push('\n');
                text.push_str(&step_text(gen));
                text.into_bytes()
            }
            _ => mutate(gen, base, &self.corpus),
        };
        if gen.chance(10) {
            bytes = mutate(gen, &bytes, &self.corpus);
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }

    fn check(&mut self, text: &String) -> Checked {
        // As `replaylab run --case FILE` reads it.
        let Ok(scenario) = (self.subject.parse)(text, "fuzz-case.toml") else { return Checked::Fine };
        let Some(seed) = scenario.seed else { return Checked::Fine };
        self.parsed += 1;
        if !(self.parsed - 1).is_multiple_of(self.subject.run_every.max(1)) {
            return Checked::Fine;
        }
        if let Some(webhook) = scenario.downstream.webhook {
            let config = WebhookConfig {
                url: String::new(),
                repeat_same_event: webhook.repeat_same_event,
                extra_event_ids: webhook.extra_event_ids,
            };
            if let Some(fanout) = webhook_fanout(Some(&config)) {
                // Not run: a finishing job would build every delivery in memory at once.
                return broken(
                    "resources",
                    format!("a case with a webhook fan-out of {MAX_WEBHOOK_FANOUT} or more parses"),
                    format!("the case parses with {fanout} webhook deliveries per finished job (not run)"),
                );
            }
        }
        self.runs += 1;
        let started = Instant::now();
        let record = runner::run(&scenario, seed, &self.subject.executor);
        self.slowest = self.slowest.max(started.elapsed().as_secs_f64());
        let verdict = record.result.verdict;
        let name = verdict.as_str();
        *self.verdicts.entry(name).or_insert(0) += 1;
        if !matches!(name, "pass" | "fail" | "unknown" | "crashed") {
            return broken(
                "verdict",
                format!("unknown verdict {name}"),
                format!("the run's verdict is {name}"),
            );
        }
        for violation in &record.result.violations {
            if violation.oracle != "expect" {
                *self.oracles.entry(violation.oracle.clone()).or_insert(0) += 1;
            }
        }
        if record.result.violations.iter().any(|violation| violation.oracle == "expect") {
            self.unmet_expectations += 1;
        }
        if verdict == Verdict::Pass && !record.result.violations.is_empty() {
            return broken(
                "verdict",
                "pass with violations",
                format!(
                    "the run passed with violations: {}",
                    record.result.violations.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
                ),
            );
        }
        Checked::Fine
    }

    fn bytes(&self, text: &String) -> Vec<u8> {
        text.clone().into_bytes()
    }

    fn notes(&self) -> String {
        let verdicts: Vec<String> =
            self.verdicts.iter().map(|(name, count)| format!("{name} {count}")).collect();
        let oracles: Vec<String> =
            self.oracles.iter().map(|(oracle, count)| format!("{oracle} {count}")).collect();
        format!(
            "{} parsed, {} run ({}; oracle violations: {}; runs with an expectation the case set unmet: {}; slowest run {:.2}s)",
            self.parsed,
            self.runs,
            if verdicts.is_empty() { "none".to_owned() } else { verdicts.join(", ") },
            if oracles.is_empty() { "none".to_owned() } else { oracles.join(", ") },
            self.unmet_expectations,
            self.slowest
        )
    }
}
