//! `matrix.json`, the canonical record, and its JSON Schema.

use sha2::{Digest, Sha256};

use crate::model::MatrixResult;

/// `matrix.json`: the result as pretty JSON with a trailing newline. The bytes depend only on
/// the result (fields in declaration order, maps sorted by key).
pub fn render_json(result: &MatrixResult) -> String {
    let mut text = serde_json::to_string_pretty(result)
        .expect("a matrix result has only string map keys and serialises");
    text.push('\n');
    text
}

/// The SHA-256 of the `matrix.json` bytes, as 64 lowercase hex digits.
pub fn matrix_sha256(result: &MatrixResult) -> String {
    let digest = Sha256::digest(render_json(result).as_bytes());
    digest.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// The JSON Schema of `matrix.json`, generated from the types, as pretty JSON with a
/// trailing newline (the bytes of `reports/schema/matrix.schema.json`).
pub fn matrix_schema() -> String {
    let schema = schemars::schema_for!(MatrixResult);
    let mut text = serde_json::to_string_pretty(&schema).expect("a JSON Schema serialises");
    text.push('\n');
    text
}
