//! Randomness: one ChaCha8 stream per (seed, target, input), interesting tokens, JSON/TOML values, byte-level mutation.

use std::fmt::Write as _;

use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};
use serde_json::Value;

use crate::model::*;

/// The random stream of one input: ChaCha8 seeded from the run's seed, the target and the
/// input's number, so that any input can be drawn again on its own.
#[derive(Debug)]
pub(crate) struct Gen(ChaCha8Rng);

impl Gen {
    pub(crate) fn for_input(seed: u64, target: Target, n: u64) -> Gen {
        let mut bytes = [0u8; 32];
        bytes[..8].copy_from_slice(&seed.to_le_bytes());
        bytes[8..16].copy_from_slice(&target.index().to_le_bytes());
        bytes[16..24].copy_from_slice(&n.to_le_bytes());
        bytes[24..].copy_from_slice(b"rl-fuzz!");
        Gen(ChaCha8Rng::from_seed(bytes))
    }

    pub(crate) fn u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// 0..n (n > 0).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.u64() % (n.max(1) as u64)) as usize
    }

    pub(crate) fn chance(&mut self, percent: u64) -> bool {
        self.u64() % 100 < percent
    }

    pub(crate) fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    pub(crate) fn word<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }

    /// 1 + a geometric number of extra steps, at most `max`.
    pub(crate) fn count(&mut self, max: usize) -> usize {
        let mut n = 1;
        while n < max && self.chance(40) {
            n += 1;
        }
        n
    }
}

/// Text tokens worth inserting anywhere.
#[rustfmt::skip]
pub(crate) const TOKENS: &[&str] = &[
    "-1", "0", "-0", "1.5", "1e2", "1e309", "-1e309", "0x10", "4294967295", "4294967296",
    "9223372036854775807", "9223372036854775808", "-9223372036854775809", "18446744073709551615",
    "18446744073709551616", "123456789012345678901234567890", "NaN", "nan", "inf", "-inf", "Infinity",
    "null", "true", "false", "\"\"", "''", "{}", "[]", "[[", "]]", "{", "}", "[", "]", "=", ",", ":", "#",
    "\"", "'", "'''", "\"\"\"", "\\", "\\u0000", "\\ud800", "\\udc00", "\\u00e9", "\\x41", "%00", "%ff",
    "%2F", "%", "\u{0}", "\u{1}", "\u{8}", "\u{1b}", "\u{7f}", "\u{85}", "\u{a0}", "\u{200b}", "\u{202e}",
    "\u{feff}", "\u{fffd}", "\u{10ffff}", "é", "𝄞", "日本", "\r\n", "\r", "\n", "\t", " ", "0s", "1ns", "24h",
    "25h", "1y", "584942417355y", "18446744073709551615s", "1500ms", "-1s", "1 s", "always", "once",
    "${ticket_of:a}", "${", "worker-0", "worker-9", "any", "downstream:after:committed", "store:before:",
    "..", "/", "//", "?", "&",
];

/// JSON number literals worth trying (some are not JSON at all).
#[rustfmt::skip]
pub(crate) const NUMBERS: &[&str] = &[
    "0", "1", "-1", "2", "42", "255", "256", "65535", "65536", "4294967295", "4294967296",
    "9223372036854775807", "9223372036854775808", "-9223372036854775808", "-9223372036854775809",
    "18446744073709551615", "18446744073709551616", "1e309", "-1e309", "1.5", "-0", "0.0", "1e2", "1E-7",
    "123456789012345678901234567890", "NaN", "Infinity", "01", "+1",
];

/// Strings worth trying.
#[rustfmt::skip]
pub(crate) const STRINGS: &[&str] = &[
    "", " ", "a", "acme", "globex", "support", "EUR", "eur", "EURO", "cus_42", "ticket_1", "job_1", "null",
    "NaN", "-1", "é", "𝄞", "\u{0}", "\u{1b}[31m", "\u{7f}", "\u{202e}abc", "\u{feff}", "\u{fffd}",
    "\u{10ffff}", "a\nb", "\r\n", "\t", "%00", "%ff", "${ticket_of:a}", "\\", "\"", "'", "'''", "k1",
    "open", "closed", "pending",
];

/// A string from [`STRINGS`], or a long one (around the 255-character and 10,000-character
/// limits, or past the 64 KiB body limit).
pub(crate) fn any_string(gen: &mut Gen) -> String {
    if gen.chance(8) {
        let length = *gen.pick(&[255usize, 256, 1000, 10_000, 10_001, 70_000]);
        let c = *gen.pick(&['a', 'é', '𝄞', '\u{0}']);
        return std::iter::repeat_n(c, length).collect();
    }
    (*gen.pick(STRINGS)).to_owned()
}

/// A small JSON-ish value tree, written as JSON or as a TOML inline value.
#[derive(Debug, Clone)]
pub(crate) enum V {
    Str(String),
    /// A number literal as written (may be no valid number at all).
    Num(String),
    Bool(bool),
    Null,
    Arr(Vec<V>),
    Obj(Vec<(String, V)>),
}

impl V {
    pub(crate) fn s(text: &str) -> V {
        V::Str(text.to_owned())
    }

    pub(crate) fn n(number: impl std::fmt::Display) -> V {
        V::Num(number.to_string())
    }

    pub(crate) fn obj(fields: &[(&str, V)]) -> V {
        V::Obj(fields.iter().map(|(k, v)| ((*k).to_owned(), v.clone())).collect())
    }

    pub(crate) fn json(&self) -> String {
        let mut out = String::new();
        self.write_json(&mut out);
        out
    }

    pub(crate) fn write_json(&self, out: &mut String) {
        match self {
            V::Str(text) => out.push_str(&json_string(text)),
            V::Num(number) => out.push_str(number),
            V::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            V::Null => out.push_str("null"),
            V::Arr(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    item.write_json(out);
                }
                out.push(']');
            }
            V::Obj(fields) => {
                out.push('{');
                for (i, (key, value)) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&json_string(key));
                    out.push(':');
                    value.write_json(out);
                }
                out.push('}');
            }
        }
    }

    pub(crate) fn toml(&self) -> String {
        match self {
            V::Str(text) => toml_string(text),
            V::Num(number) => number.clone(),
            V::Bool(b) => b.to_string(),
            V::Null => "\"\"".into(),
            V::Arr(items) => format!("[{}]", items.iter().map(V::toml).collect::<Vec<_>>().join(", ")),
            V::Obj(fields) => format!(
                "{{ {} }}",
                fields
                    .iter()
                    .map(|(k, v)| format!("{} = {}", toml_key(k), v.toml()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }

    /// Replaces a random scalar somewhere in the tree with an odd value, drops a field, or
    /// duplicates one.
    pub(crate) fn perturb(&mut self, gen: &mut Gen) {
        match self {
            V::Obj(fields) if !fields.is_empty() => {
                let i = gen.below(fields.len());
                match gen.below(6) {
                    0 => {
                        fields.remove(i);
                    }
                    1 => {
                        let copy = fields[i].clone();
                        fields.push(copy);
                    }
                    2 => fields.push((any_string(gen), odd_value(gen))),
                    _ => fields[i].1.perturb(gen),
                }
            }
            V::Arr(items) if !items.is_empty() => {
                let i = gen.below(items.len());
                items[i].perturb(gen);
            }
            _ => *self = odd_value(gen),
        }
    }
}

/// An odd scalar (or a small container) of any type.
pub(crate) fn odd_value(gen: &mut Gen) -> V {
    match gen.below(8) {
        0 | 1 => V::Str(any_string(gen)),
        2 | 3 => V::n(gen.pick(NUMBERS)),
        4 => V::Bool(gen.chance(50)),
        5 => V::Null,
        6 => V::Arr(vec![V::n(gen.pick(NUMBERS)), V::Str(any_string(gen))]),
        _ => V::Obj(vec![(any_string(gen), V::n(gen.pick(NUMBERS)))]),
    }
}

pub(crate) fn json_string(text: &str) -> String {
    serde_json::to_string(text).expect("a string serialises")
}

/// A TOML basic string (control characters escaped).
pub(crate) fn toml_string(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04X}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

pub(crate) fn toml_key(key: &str) -> String {
    if !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
        key.to_owned()
    } else {
        toml_string(key)
    }
}

/// Byte-level mutation of `base`: one or more of bit flips, random bytes, deleted or
/// duplicated ranges and lines, swapped lines, truncation, inserted tokens, numbers or quoted
/// strings replaced by tokens, and splices from `others`.
pub(crate) fn mutate(gen: &mut Gen, base: &[u8], others: &[Vec<u8>]) -> Vec<u8> {
    let mut data = base.to_vec();
    for _ in 0..gen.count(6) {
        mutate_once(gen, &mut data, others);
        if data.len() > 256 * 1024 {
            data.truncate(256 * 1024);
        }
    }
    data
}

pub(crate) fn mutate_once(gen: &mut Gen, data: &mut Vec<u8>, others: &[Vec<u8>]) {
    let len = data.len();
    let at = |gen: &mut Gen| gen.below(len + 1);
    match gen.below(14) {
        0 if len > 0 => {
            let i = gen.below(len);
            data[i] ^= 1 << gen.below(8);
        }
        1 if len > 0 => {
            let i = gen.below(len);
            data[i] = gen.u64() as u8;
        }
        2 if len > 0 => {
            let start = gen.below(len);
            let end = (start + 1 + gen.below(16)).min(len);
            data.drain(start..end);
        }
        3 => data.truncate(at(gen)),
        4 | 5 => {
            let i = at(gen);
            let token = gen.pick(TOKENS).as_bytes();
            data.splice(i..i, token.iter().copied());
        }
        6 => replace_token(gen, data),
        7 | 8 => {
            // Duplicate a line (a duplicated key, a repeated header, a repeated table).
            let lines = line_spans(data);
            let (start, end) = lines[gen.below(lines.len())];
            let line = data[start..end].to_vec();
            let (to, _) = lines[gen.below(lines.len())];
            data.splice(to..to, line);
        }
        9 => {
            let lines = line_spans(data);
            let (start, end) = lines[gen.below(lines.len())];
            data.drain(start..end);
        }
        10 => {
            let lines = line_spans(data);
            let a = lines[gen.below(lines.len())];
            let b = lines[gen.below(lines.len())];
            let (first, second) = if a.0 <= b.0 { (a, b) } else { (b, a) };
            if first.1 <= second.0 {
                let one = data[first.0..first.1].to_vec();
                let two = data[second.0..second.1].to_vec();
                data.splice(second.0..second.1, one);
                data.splice(first.0..first.1, two);
            }
        }
        11 if len > 0 => {
            let start = gen.below(len);
            let end = (start + 1 + gen.below(64)).min(len);
            let copy = data[start..end].to_vec();
            let to = at(gen);
            data.splice(to..to, copy);
        }
        12 if !others.is_empty() => {
            // Splice: our head, another example's tail.
            let other = &others[gen.below(others.len())];
            let cut = at(gen);
            let from = gen.below(other.len() + 1);
            data.truncate(cut);
            data.extend_from_slice(&other[from..]);
        }
        _ => {
            let i = at(gen);
            let long = any_string(gen);
            data.splice(i..i, long.into_bytes());
        }
    }
}

/// `(start, end)` of every line, the newline included; at least one span.
pub(crate) fn line_spans(data: &[u8]) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut start = 0;
    for (i, &b) in data.iter().enumerate() {
        if b == b'\n' {
            spans.push((start, i + 1));
            start = i + 1;
        }
    }
    if start < data.len() || spans.is_empty() {
        spans.push((start, data.len()));
    }
    spans
}

/// Replaces one run of digits, or the inside of one quoted string, with a token.
pub(crate) fn replace_token(gen: &mut Gen, data: &mut Vec<u8>) {
    let mut spans = Vec::new();
    let mut i = 0;
    while i < data.len() {
        if data[i].is_ascii_digit() {
            let start = i;
            while i < data.len() && (data[i].is_ascii_digit() || data[i] == b'.') {
                i += 1;
            }
            spans.push((start, i, true));
        } else if data[i] == b'"' {
            let start = i + 1;
            i += 1;
            while i < data.len() && data[i] != b'"' && data[i] != b'\n' {
                i += if data[i] == b'\\' { 2 } else { 1 };
            }
            let end = i.min(data.len());
            spans.push((start, end, false));
            i += 1;
        } else {
            i += 1;
        }
    }
    if spans.is_empty() {
        return;
    }
    let (start, end, number) = spans[gen.below(spans.len())];
    let replacement = if number || gen.chance(30) {
        (*gen.pick(NUMBERS)).to_owned()
    } else {
        any_string(gen).replace('\\', "\\\\").replace('"', "\\\"")
    };
    data.splice(start..end, replacement.into_bytes());
}

pub(crate) fn shuffle<T>(gen: &mut Gen, items: &mut [T]) {
    for i in (1..items.len()).rev() {
        let j = gen.below(i + 1);
        items.swap(i, j);
    }
}

/// A JSON object with nested objects, arrays, floats, unicode keys.
pub(crate) fn nested_value(gen: &mut Gen, depth: u32) -> V {
    let mut fields = Vec::new();
    for _ in 0..gen.below(5) {
        let key = if gen.chance(70) {
            (*gen.pick(&["month", "a", "b", "é", "𝄞", "", "A", "aa", "\u{0}", "10", "9", "_"])).to_owned()
        } else {
            any_string(gen)
        };
        let value = match gen.below(7) {
            0 if depth > 0 => nested_value(gen, depth - 1),
            1 => V::Arr((0..gen.below(3)).map(|_| odd_value(gen)).collect()),
            2 => V::n(gen.pick(&[
                "1",
                "1.0",
                "1e2",
                "100",
                "-0",
                "0.1",
                "1e-7",
                "5e-324",
                "1.7976931348623157e308",
                "123456789012345678",
            ])),
            _ => odd_value(gen),
        };
        fields.push((key, value));
    }
    V::Obj(fields)
}

/// `value` as JSON text with its object keys in a random order, random whitespace between
/// tokens, and some characters of its strings written as `\u` escapes: the same JSON value.
pub(crate) fn rewrite(gen: &mut Gen, value: &Value) -> String {
    let mut out = String::new();
    write_scrambled(gen, value, &mut out);
    out
}

pub(crate) fn space(gen: &mut Gen, out: &mut String) {
    if gen.chance(40) {
        for _ in 0..gen.count(3) {
            out.push(*gen.pick(&[' ', '\t', '\n', '\r']));
        }
    }
}

pub(crate) fn write_scrambled(gen: &mut Gen, value: &Value, out: &mut String) {
    space(gen, out);
    match value {
        Value::Object(fields) => {
            let mut entries: Vec<(&String, &Value)> = fields.iter().collect();
            shuffle(gen, &mut entries);
            out.push('{');
            for (i, (key, value)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                space(gen, out);
                write_escaped(gen, key, out);
                space(gen, out);
                out.push(':');
                write_scrambled(gen, value, out);
            }
            space(gen, out);
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_scrambled(gen, item, out);
            }
            space(gen, out);
            out.push(']');
        }
        Value::String(text) => write_escaped(gen, text, out),
        other => out.push_str(&other.to_string()),
    }
    space(gen, out);
}

pub(crate) fn write_escaped(gen: &mut Gen, text: &str, out: &mut String) {
    out.push('"');
    for c in text.chars() {
        let must = matches!(c, '"' | '\\') || u32::from(c) < 0x20;
        if must || gen.chance(10) {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                let _ = write!(out, "\\u{unit:04x}");
            }
        } else if c == '/' && gen.chance(50) {
            out.push_str("\\/");
        } else {
            out.push(c);
        }
    }
    out.push('"');
}

/// Arguments for `tool`, mostly valid.
pub(crate) fn argument_value(gen: &mut Gen, tool: &str) -> V {
    let names: &[&str] = match tool {
        "tickets.create" => &["queue", "subject", "body", "trace_id"],
        "tickets.set_status" => &["ticket_id", "status", "expected_version", "trace_id"],
        "payments.charge" => &["customer", "amount_minor", "currency", "trace_id"],
        "messages.send" => &["to", "body", "trace_id"],
        _ => &["job_type", "input", "trace_id"],
    };
    let mut fields = Vec::new();
    for &name in names {
        if gen.chance(if name == "trace_id" { 30 } else { 90 }) {
            fields.push((name.to_owned(), argument_of(gen, name)));
        }
    }
    if gen.chance(5) {
        fields.push((any_string(gen), odd_value(gen)));
    }
    shuffle(gen, &mut fields);
    let mut value = V::Obj(fields);
    if gen.chance(20) {
        value.perturb(gen);
    }
    value
}

pub(crate) fn argument_of(gen: &mut Gen, name: &str) -> V {
    match name {
        "amount_minor" | "expected_version" => {
            if gen.chance(70) {
                V::n(gen.below(100_000))
            } else {
                V::n(gen.pick(NUMBERS))
            }
        }
        "input" => nested_value(gen, 3),
        "currency" => V::s(gen.word(&["EUR", "USD", "eur", "EURO", "€"])),
        "status" => V::s(gen.word(&["open", "pending", "closed", "reopened"])),
        "ticket_id" => V::s(gen.word(&["ticket_1", "${ticket_of:a}", "ticket_2"])),
        _ => {
            if gen.chance(60) {
                let words =
                    ["cus_42", "support", "Refund request", "Welcome aboard.", "invoice_report", "t-1"];
                V::s(gen.word(&words))
            } else {
                V::Str(any_string(gen))
            }
        }
    }
}
