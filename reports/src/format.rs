//! The report formats, the render options and writing the files.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::model::MatrixResult;

/// The environment variable GitHub Actions sets to the file of a job step's summary.
pub const STEP_SUMMARY_VARIABLE: &str = "GITHUB_STEP_SUMMARY";

/// The environment variable of reproducible builds: a fixed "now", in seconds since 1970.
const SOURCE_DATE_EPOCH_VARIABLE: &str = "SOURCE_DATE_EPOCH";

/// One kind of report file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Format {
    /// `matrix.json`, the canonical record.
    Json,
    /// `matrix.md`, tables for a pull request or a step summary.
    Markdown,
    /// `junit.xml`, for CI test dashboards.
    Junit,
    /// `report.html`, one self-contained page with timelines.
    Html,
}

impl Format {
    /// Every format, in the order the files are written.
    pub const ALL: [Format; 4] = [Format::Json, Format::Markdown, Format::Junit, Format::Html];

    /// The name on the command line: `json`, `md`, `junit`, `html`.
    pub fn name(self) -> &'static str {
        match self {
            Format::Json => "json",
            Format::Markdown => "md",
            Format::Junit => "junit",
            Format::Html => "html",
        }
    }

    /// The file it is written to: `matrix.json`, `matrix.md`, `junit.xml`, `report.html`.
    pub fn file_name(self) -> &'static str {
        match self {
            Format::Json => "matrix.json",
            Format::Markdown => "matrix.md",
            Format::Junit => "junit.xml",
            Format::Html => "report.html",
        }
    }

    /// Parses a comma-separated list such as `json,md,junit,html` (spaces around names are
    /// allowed; a name given twice counts once; `all` means every format).
    pub fn parse_list(text: &str) -> Result<Vec<Format>, ReportError> {
        let mut formats = Vec::new();
        for name in text.split(',') {
            let name = name.trim();
            let parsed = if name == "all" { Format::ALL.to_vec() } else { vec![name.parse()?] };
            for format in parsed {
                if !formats.contains(&format) {
                    formats.push(format);
                }
            }
        }
        Ok(formats)
    }
}

impl FromStr for Format {
    type Err = ReportError;

    /// `json`, `md` (or `markdown`), `junit`, `html`.
    fn from_str(name: &str) -> Result<Format, ReportError> {
        match name {
            "json" => Ok(Format::Json),
            "md" | "markdown" => Ok(Format::Markdown),
            "junit" => Ok(Format::Junit),
            "html" => Ok(Format::Html),
            _ => Err(ReportError::UnknownFormat { name: name.to_owned() }),
        }
    }
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.name())
    }
}

/// What a report may show beyond the result itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RenderOptions {
    /// The time the reports name as "generated", in seconds since 1970 (UTC). Only ever set
    /// from `SOURCE_DATE_EPOCH`: without it the reports carry no time stamp at all.
    pub generated_at_s: Option<i64>,
}

impl RenderOptions {
    /// No time stamp.
    pub fn new() -> RenderOptions {
        RenderOptions::default()
    }

    /// The reports name `seconds` (since 1970, UTC) as their generation time.
    pub fn generated_at(seconds: i64) -> RenderOptions {
        RenderOptions { generated_at_s: Some(seconds) }
    }

    /// Reads `SOURCE_DATE_EPOCH`: a time stamp when it is set, none when it is not.
    pub fn from_env() -> Result<RenderOptions, ReportError> {
        match std::env::var(SOURCE_DATE_EPOCH_VARIABLE) {
            Ok(value) => RenderOptions::from_source_date_epoch(&value),
            Err(std::env::VarError::NotPresent) => Ok(RenderOptions::new()),
            Err(std::env::VarError::NotUnicode(value)) => {
                Err(ReportError::SourceDateEpoch { value: value.to_string_lossy().into_owned() })
            }
        }
    }

    /// Parses a `SOURCE_DATE_EPOCH` value: whole seconds since 1970, no sign, no spaces.
    pub fn from_source_date_epoch(value: &str) -> Result<RenderOptions, ReportError> {
        let invalid = || ReportError::SourceDateEpoch { value: value.to_owned() };
        if value.is_empty() || !value.bytes().all(|byte| byte.is_ascii_digit()) {
            return Err(invalid());
        }
        let seconds: i64 = value.parse().map_err(|_| invalid())?;
        chrono::DateTime::from_timestamp(seconds, 0).ok_or_else(invalid)?;
        Ok(RenderOptions::generated_at(seconds))
    }

    /// The time stamp as RFC 3339 UTC (`2024-05-01T12:00:00Z`), when there is one.
    pub(crate) fn generated_at_text(&self) -> Option<String> {
        self.generated_at_utc().map(|time| time.format("%Y-%m-%dT%H:%M:%SZ").to_string())
    }

    /// The time stamp, when there is one (and it is within chrono's range).
    pub(crate) fn generated_at_utc(&self) -> Option<chrono::DateTime<chrono::Utc>> {
        self.generated_at_s.and_then(|seconds| chrono::DateTime::from_timestamp(seconds, 0))
    }
}

/// Why reports could not be produced. Messages read after "failed to".
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReportError {
    /// A format name is not one of `json`, `md`, `junit`, `html`.
    #[error("recognise the report format \"{name}\" (expected json, md, junit, html or all)")]
    UnknownFormat {
        /// The name given.
        name: String,
    },
    /// `SOURCE_DATE_EPOCH` is set but is not whole seconds since 1970.
    #[error("read SOURCE_DATE_EPOCH={value:?} as whole seconds since 1970")]
    SourceDateEpoch {
        /// The value found.
        value: String,
    },
    /// The report directory could not be created.
    #[error("create the report directory {}", path.display())]
    CreateDirectory {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A report file could not be written.
    #[error("write the report {}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// The text of one report format.
pub fn render(result: &MatrixResult, format: Format, options: &RenderOptions) -> String {
    match format {
        Format::Json => crate::json::render_json(result),
        Format::Markdown => crate::markdown::render_markdown(result, options),
        Format::Junit => crate::junit::render_junit(result, options),
        Format::Html => crate::html::render_html(result, options),
    }
}

/// Writes the chosen formats into `dir` (created if missing) and returns the files written,
/// in the order of `formats`. A time stamp comes only from `SOURCE_DATE_EPOCH`.
pub fn write_reports(
    result: &MatrixResult,
    dir: &Path,
    formats: &[Format],
) -> Result<Vec<PathBuf>, ReportError> {
    write_reports_with(result, dir, formats, &RenderOptions::from_env()?)
}

/// [`write_reports`] with explicit options instead of the environment.
pub fn write_reports_with(
    result: &MatrixResult,
    dir: &Path,
    formats: &[Format],
    options: &RenderOptions,
) -> Result<Vec<PathBuf>, ReportError> {
    std::fs::create_dir_all(dir)
        .map_err(|source| ReportError::CreateDirectory { path: dir.to_owned(), source })?;
    let mut written: Vec<PathBuf> = Vec::with_capacity(formats.len());
    for &format in formats {
        let path = dir.join(format.file_name());
        if written.contains(&path) {
            continue;
        }
        std::fs::write(&path, render(result, format, options))
            .map_err(|source| ReportError::Write { path: path.clone(), source })?;
        written.push(path);
    }
    Ok(written)
}

/// The most GitHub shows of one step's summary: past it, it shows none of it.
pub const STEP_SUMMARY_LIMIT_BYTES: usize = 1024 * 1024;

/// Room kept free below [`STEP_SUMMARY_LIMIT_BYTES`] when appending (GitHub counts the
/// summary as it renders it; a little slack costs nothing).
const STEP_SUMMARY_SLACK_BYTES: usize = 16 * 1024;

/// The step summary's file, when `$GITHUB_STEP_SUMMARY` names one.
fn step_summary_path() -> Option<PathBuf> {
    std::env::var_os(STEP_SUMMARY_VARIABLE).filter(|value| !value.is_empty()).map(PathBuf::from)
}

/// How many bytes may still be appended to the step summary at `path`, given what it holds.
fn step_summary_room(path: &Path) -> usize {
    let held =
        std::fs::metadata(path).map_or(0, |metadata| usize::try_from(metadata.len()).unwrap_or(usize::MAX));
    STEP_SUMMARY_LIMIT_BYTES.saturating_sub(STEP_SUMMARY_SLACK_BYTES).saturating_sub(held)
}

fn append(path: &Path, text: &str) -> Result<(), ReportError> {
    let write = || -> std::io::Result<()> {
        let mut file = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
        file.write_all(text.as_bytes())
    };
    write().map_err(|source| ReportError::Write { path: path.to_owned(), source })
}

/// Appends `text` to the file named by `$GITHUB_STEP_SUMMARY` when that variable is set
/// (GitHub Actions shows it on the run's page) and returns that file; does nothing and
/// returns `None` when it is not set. A text that would take the file past GitHub's 1 MiB
/// ([`STEP_SUMMARY_LIMIT_BYTES`], less some slack) is cut at its last line that fits, and says
/// so.
pub fn append_step_summary(text: &str) -> Result<Option<PathBuf>, ReportError> {
    let Some(path) = step_summary_path() else { return Ok(None) };
    let room = step_summary_room(&path);
    if text.len() <= room {
        append(&path, text)?;
    } else {
        const CUT: &str = "\n**The rest is cut** to keep the step summary under GitHub's 1 MiB.\n";
        let budget = room.saturating_sub(CUT.len());
        // A line ends at a `\n`, a one-byte character: the cut is on a character boundary.
        let end = text.as_bytes()[..budget]
            .iter()
            .rposition(|byte| *byte == b'\n')
            .map_or(0, |newline| newline + 1);
        append(&path, &format!("{}{CUT}", &text[..end]))?;
    }
    Ok(Some(path))
}

/// Appends a matrix's `matrix.md` to `$GITHUB_STEP_SUMMARY` when that variable is set, cut
/// between sections ([`render_markdown_capped`](crate::render_markdown_capped)) so that the
/// file stays under GitHub's 1 MiB with what it already holds, and at most
/// [`MARKDOWN_CAP_BYTES`](crate::MARKDOWN_CAP_BYTES); returns that file, or `None` when the
/// variable is not set.
pub fn append_matrix_step_summary(
    result: &MatrixResult,
    options: &RenderOptions,
) -> Result<Option<PathBuf>, ReportError> {
    let Some(path) = step_summary_path() else { return Ok(None) };
    let cap = step_summary_room(&path).min(crate::markdown::MARKDOWN_CAP_BYTES);
    append(&path, &crate::markdown::render_markdown_capped(result, options, cap))?;
    Ok(Some(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_lists_parse_in_order_without_repeats() {
        let check = |text: &str, expected: &[Format]| {
            assert_eq!(Format::parse_list(text).unwrap(), expected, "{text}");
        };
        check("json,md,junit,html", &Format::ALL);
        check("html, json", &[Format::Html, Format::Json]);
        check("md,markdown,md", &[Format::Markdown]);
        check("all", &Format::ALL);
    }

    #[test]
    fn unknown_format_names_are_refused_with_the_name() {
        let error = Format::parse_list("json,pdf").unwrap_err();
        assert_eq!(
            error.to_string(),
            "recognise the report format \"pdf\" (expected json, md, junit, html or all)"
        );
        assert!(Format::parse_list("").is_err());
    }

    #[test]
    fn every_format_names_its_own_file() {
        let files: Vec<&str> = Format::ALL.iter().map(|f| f.file_name()).collect();
        assert_eq!(files, ["matrix.json", "matrix.md", "junit.xml", "report.html"]);
        for format in Format::ALL {
            assert_eq!(format.name().parse::<Format>().unwrap(), format);
        }
    }

    #[test]
    fn source_date_epoch_must_be_whole_seconds() {
        let options = RenderOptions::from_source_date_epoch("1700000000").unwrap();
        assert_eq!(options.generated_at_text().as_deref(), Some("2023-11-14T22:13:20Z"));
        for bad in ["", "-5", " 17", "1.5", "soon", "99999999999999999999"] {
            assert!(RenderOptions::from_source_date_epoch(bad).is_err(), "{bad:?}");
        }
        assert_eq!(RenderOptions::new().generated_at_text(), None);
    }
}
