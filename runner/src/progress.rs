//! Long work shows itself on stderr (issue 46): a black-box matrix or an exploration of real
//! processes can take many minutes. On a terminal, a bar (indicatif): done, left, the time an
//! estimate says is left, and what is running now. Where stderr is no terminal (a CI log, a
//! pipe), a plain line at most every [`PLAIN_EVERY`] for work that asks for lines (real
//! processes), and nothing for the rest (a simulated matrix takes seconds). stdout, the
//! report, is never touched.

use std::io::IsTerminal;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often a plain progress line is written, at most.
pub const PLAIN_EVERY: Duration = Duration::from_secs(30);

/// Progress of `total` units of work.
#[derive(Debug)]
pub struct Progress {
    label: String,
    what: &'static str,
    total: u64,
    bar: Option<indicatif::ProgressBar>,
    /// Where stderr is no terminal and lines were asked for: when the last line was written.
    plain: Option<Mutex<Instant>>,
    started: Instant,
    done: std::sync::atomic::AtomicU64,
}

/// `1m05s`.
fn clock(duration: Duration) -> String {
    let seconds = duration.as_secs();
    if seconds < 60 {
        format!("{seconds}s")
    } else if seconds < 3600 {
        format!("{}m{:02}s", seconds / 60, seconds % 60)
    } else {
        format!("{}h{:02}m", seconds / 3600, (seconds % 3600) / 60)
    }
}

impl Progress {
    /// Progress of `total` `what` (`runs`, `cases`) under `label` (`matrix`); `lines`: plain
    /// lines where stderr is no terminal.
    pub fn new(label: &str, total: u64, what: &'static str, lines: bool) -> Self {
        let terminal = std::io::stderr().is_terminal();
        let bar = terminal.then(|| {
            let bar = indicatif::ProgressBar::with_draw_target(
                Some(total),
                indicatif::ProgressDrawTarget::stderr(),
            );
            let template =
                format!("{label} {{elapsed}} [{{bar:30}}] {{pos}}/{{len}} {what}, {{eta}} left {{msg}}");
            if let Ok(style) = indicatif::ProgressStyle::with_template(&template) {
                bar.set_style(style.progress_chars("=> "));
            }
            bar
        });
        Self {
            label: label.to_owned(),
            what,
            total,
            bar,
            plain: (!terminal && lines).then(|| Mutex::new(Instant::now())),
            started: Instant::now(),
            done: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// No progress shown anywhere.
    pub fn hidden() -> Self {
        Self {
            label: String::new(),
            what: "",
            total: 0,
            bar: None,
            plain: None,
            started: Instant::now(),
            done: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// What is running now (the bar's message).
    pub fn running(&self, message: String) {
        if let Some(bar) = &self.bar {
            bar.set_message(message);
        }
    }

    /// One unit done; `tally` says what came of the work so far (`2 fail, 1 unknown`).
    pub fn done(&self, tally: impl FnOnce() -> String) {
        let done = self.done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        if let Some(bar) = &self.bar {
            bar.inc(1);
        }
        let Some(plain) = &self.plain else { return };
        let mut last = plain.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if last.elapsed() < PLAIN_EVERY && done < self.total {
            return;
        }
        *last = Instant::now();
        eprintln!("{}", self.line(done, &tally()));
    }

    /// The plain line for `done` units.
    fn line(&self, done: u64, tally: &str) -> String {
        let elapsed = self.started.elapsed();
        let left = self.total.saturating_sub(done);
        let estimate = if done == 0 || left == 0 {
            String::new()
        } else {
            format!(", about {} left", clock(elapsed.mul_f64(left as f64 / done as f64)))
        };
        let tally = if tally.is_empty() { String::new() } else { format!(" ({tally})") };
        format!(
            "{}: {done} of {} {} done in {}{tally}{estimate}",
            self.label,
            self.total,
            self.what,
            clock(elapsed)
        )
    }

    /// A line above the bar (on a terminal) or on its own (elsewhere, where lines were asked
    /// for): a phase of the work began or ended.
    pub fn say(&self, line: &str) {
        match (&self.bar, &self.plain) {
            (Some(bar), _) => bar.println(line),
            (None, Some(_)) => eprintln!("{line}"),
            (None, None) => {}
        }
    }

    /// The work is over: the bar goes.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_line_says_what_is_done_and_what_is_left() {
        let progress = Progress {
            label: "matrix".into(),
            what: "runs",
            total: 68,
            bar: None,
            plain: None,
            started: Instant::now() - Duration::from_secs(80),
            done: std::sync::atomic::AtomicU64::new(0),
        };
        let line = progress.line(20, "1 fail");
        assert!(line.starts_with("matrix: 20 of 68 runs done in 1m2"), "{line}");
        assert!(line.contains("(1 fail), about 3m1"), "{line}");
        assert_eq!(
            progress.line(68, ""),
            format!("matrix: 68 of 68 runs done in {}", clock(progress.started.elapsed()))
        );
    }

    #[test]
    fn clocks_read_as_minutes_and_hours() {
        assert_eq!(clock(Duration::from_secs(5)), "5s");
        assert_eq!(clock(Duration::from_secs(65)), "1m05s");
        assert_eq!(clock(Duration::from_secs(3_725)), "1h02m");
    }
}
