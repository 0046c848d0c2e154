//! Target `fault_rule`: bytes into `FaultRule::from_json`; what is accepted round-trips.

use serde_json::Value;

use crate::corpus::*;
use crate::gen::*;
use crate::guard::*;
use crate::model::*;

pub(crate) struct FaultRuleFuzz {
    subject: FaultRuleSubject,
    corpus: Vec<Vec<u8>>,
    accepted: u64,
}

impl FaultRuleFuzz {
    pub(crate) fn new(subject: FaultRuleSubject) -> Self {
        let mut corpus: Vec<Vec<u8>> = DOCUMENTED_RULES.iter().map(|rule| rule.as_bytes().to_vec()).collect();
        corpus.extend(scenario_rules().into_iter().map(String::into_bytes));
        Self { subject, corpus, accepted: 0 }
    }
}

impl Fuzz for FaultRuleFuzz {
    type Input = Vec<u8>;

    fn generate(&mut self, gen: &mut Gen, _n: u64) -> Vec<u8> {
        let base = &self.corpus[gen.below(self.corpus.len())];
        match gen.below(10) {
            0..=2 => mutate(gen, base, &self.corpus),
            3 => mutate_gently(gen, base),
            4 => valid_fault_rule(gen).json().into_bytes(),
            5 => {
                // The same rule, keys in another order, other whitespace and escapes.
                let text = valid_fault_rule(gen).json();
                let value: Value = serde_json::from_str(&text).expect("a generated rule is JSON");
                rewrite(gen, &value).into_bytes()
            }
            6 => {
                let text = valid_fault_rule(gen).json();
                mutate_gently(gen, text.as_bytes())
            }
            7 => fault_rule_value(gen).json().into_bytes(),
            _ => {
                let rule = if gen.chance(50) { fault_rule_value(gen) } else { valid_fault_rule(gen) };
                mutate(gen, rule.json().as_bytes(), &self.corpus)
            }
        }
    }

    fn check(&mut self, bytes: &Vec<u8>) -> Checked {
        let Ok(rule) = (self.subject.parse)(bytes) else { return Checked::Fine };
        self.accepted += 1;
        let written = (self.subject.to_json)(&rule).to_string();
        match (self.subject.parse)(written.as_bytes()) {
            Err(error) => broken(
                "round_trip",
                format!("written form refused: {}", error.chars().take(60).collect::<String>()),
                format!("to_json_value's output {written} is refused: {error}"),
            ),
            Ok(again) if again != rule => broken(
                "round_trip",
                "written form reads as another rule",
                format!("to_json_value's output {written} reads as {again:?}, not {rule:?}"),
            ),
            Ok(_) => Checked::Fine,
        }
    }

    fn bytes(&self, bytes: &Vec<u8>) -> Vec<u8> {
        bytes.clone()
    }

    fn notes(&self) -> String {
        format!("{} accepted", self.accepted)
    }
}
