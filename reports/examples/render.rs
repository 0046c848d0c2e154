//! Renders a `matrix.json` written by `replaylab matrix` into the other report formats.
//!
//! ```sh
//! cargo run -p reports --example render -- target/report/matrix.json target/report md,junit,html
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    let [input, output, rest @ ..] = arguments.as_slice() else {
        eprintln!("usage: render MATRIX_JSON OUT_DIR [FORMATS (default json,md,junit,html)]");
        return ExitCode::from(2);
    };
    let formats = rest.first().map_or("json,md,junit,html", String::as_str);
    match run(input, output, formats) {
        Ok(written) => {
            for path in written {
                println!("wrote {}", path.display());
            }
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("error: failed to {message}");
            ExitCode::from(2)
        }
    }
}

fn run(input: &str, output: &str, formats: &str) -> Result<Vec<PathBuf>, String> {
    let formats = reports::Format::parse_list(formats).map_err(|error| error.to_string())?;
    let text = std::fs::read_to_string(input).map_err(|error| format!("read {input}: {error}"))?;
    let result: reports::MatrixResult =
        serde_json::from_str(&text).map_err(|error| format!("read {input} as a matrix result: {error}"))?;
    reports::write_reports(&result, output.as_ref(), &formats).map_err(|error| error.to_string())
}
