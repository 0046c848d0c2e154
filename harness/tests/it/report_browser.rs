//! report.html in a real browser: the failing S05 of `mutant:read_then_insert` and S08 of
//! `mutant:no_auth_recheck`, opened in headless Chromium at 1400 px and at phone width (390
//! px). The page must not scroll sideways, no failure box may reach past the screen or
//! overflow its own width, no row or scenario id may break mid-word ("S1" over "3"), and the
//! violations must be marked where the reader looks. The
//! screenshots are kept (`target/tmp/report-browser/`) for a person to look at.
//!
//! Headless Chromium will not make a window narrower than 500 px, so each width is an iframe of
//! exactly that width in a wider window; the page measures itself inside it and hands the
//! numbers to the frame's parent (file pages may reach each other with
//! `--allow-file-access-from-files`), whose DOM `--dump-dom` prints.
//!
//! Chromium comes from Debian's `chromium` package (`.ci/run` installs it). Without it this
//! test fails under CI and, elsewhere, says how to install it and checks nothing.

use crate::installed;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const REPLAYLAB: &str = env!("CARGO_BIN_EXE_replaylab");
/// The widths a report is read at: a laptop, a phone.
const WIDTHS: [u32; 2] = [1400, 390];
/// How long one Chromium run may take on a slow, busy machine.
const BROWSER_PATIENCE: Duration = Duration::from_secs(120);
/// Where the page's own measurements are written for `--dump-dom` to carry out.
const PROBE_ID: &str = "replaylab-probe";

/// Measures the page once laid out, and writes the numbers into a `<pre>`: the page's
/// sideways overflow, and per failure box how far it reaches past the screen and past its
/// own width. Only numbers and ids, so the text needs no escaping.
const PROBE: &str = r#"<script>
(function () {
  var view = window.innerWidth;
  var page = document.documentElement.scrollWidth - view;
  var boxes = Array.prototype.map.call(document.querySelectorAll('.failure'), function (box) {
    var section = box.closest('[id]');
    var rect = box.getBoundingClientRect();
    return (section ? section.id : '?') + ':' + Math.ceil(rect.right - view) + ':' + (box.scrollWidth - box.clientWidth);
  });
  var marked = document.querySelectorAll('.m.bad').length;
  var wrong = document.querySelectorAll('.ops .e-wrong').length;
  var broken = Array.prototype.filter.call(document.querySelectorAll('table.rows td:first-child strong, table.rows td[data-label="decided by"] a, table.scenarios td:first-child a'), function (id) {
    return id.getClientRects().length > 1;
  }).length;
  var host = window.parent.document;
  var out = host.createElement('pre');
  out.id = 'replaylab-probe';
  out.textContent = 'view=' + view + ' page=' + page + ' marked=' + marked + ' wrong=' + wrong + ' broken=' + broken + ' boxes=' + boxes.join(',');
  host.body.appendChild(out);
})();
</script>"#;

fn chromium() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("REPLAYLAB_CHROMIUM") {
        return Some(PathBuf::from(path));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|dir| ["chromium", "chromium-browser"].map(|name| dir.join(name)))
        .find(|candidate| candidate.is_file())
}

fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("report-browser").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    dir
}

/// Runs Chromium headless with `args` and the page, within [`BROWSER_PATIENCE`]; its standard
/// output.
fn browse(chromium: &Path, profile: &Path, width: u32, args: &[String], page: &Path) -> String {
    let mut child = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
        ])
        .arg("--allow-file-access-from-files")
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--window-size={},2400", width.max(500) + 40))
        .args(args)
        .arg(format!("file://{}", page.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromium starts");
    let mut stdout = child.stdout.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut text).expect("chromium's output is text");
        text
    });
    let started = Instant::now();
    loop {
        if child.try_wait().expect("chromium can be waited for").is_some() {
            break;
        }
        if started.elapsed() > BROWSER_PATIENCE {
            let _ = child.kill();
            panic!("chromium took more than {BROWSER_PATIENCE:?} on {}", page.display());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    reader.join().expect("the reader thread ends")
}

/// A page that shows `page` in a frame exactly `width` px wide.
fn framed(page: &Path, width: u32) -> PathBuf {
    let frame = page.with_file_name(format!("frame-{width}.html"));
    let name = page.file_name().expect("a file name").to_string_lossy();
    let html = format!(
        "<!DOCTYPE html><html><body style=\"margin:0\"><iframe src=\"{name}\" \
         style=\"width:{width}px;height:2400px;border:0\"></iframe></body></html>\n"
    );
    std::fs::write(&frame, html).expect("the frame page");
    frame
}

/// One measured page: its width, how far it scrolls sideways, marked events, wrong table
/// entries, and the failure boxes as (section, past the screen, past its own width).
struct Measured {
    view: i64,
    page: i64,
    marked: u64,
    wrong: u64,
    /// Ids (S13, C10) in the rows and scenarios tables laid out on more than one line.
    broken: u64,
    boxes: Vec<(String, i64, i64)>,
}

fn measure(dom: &str) -> Measured {
    let start = dom.find(&format!("<pre id=\"{PROBE_ID}\">")).expect("the probe ran in the page")
        + PROBE_ID.len()
        + 11;
    let end = start + dom[start..].find("</pre>").expect("the probe's text ends");
    let mut measured = Measured { view: 0, page: 0, marked: 0, wrong: 0, broken: 0, boxes: Vec::new() };
    for field in dom[start..end].split(' ') {
        let (key, value) = field.split_once('=').expect("key=value");
        match key {
            "view" => measured.view = value.parse().expect("a number"),
            "page" => measured.page = value.parse().expect("a number"),
            "marked" => measured.marked = value.parse().expect("a number"),
            "wrong" => measured.wrong = value.parse().expect("a number"),
            "broken" => measured.broken = value.parse().expect("a number"),
            "boxes" => {
                measured.boxes = value
                    .split(',')
                    .filter(|item| !item.is_empty())
                    .map(|item| {
                        let parts: Vec<&str> = item.split(':').collect();
                        (
                            parts[0].to_owned(),
                            parts[1].parse().expect("a number"),
                            parts[2].parse().expect("a number"),
                        )
                    })
                    .collect();
            }
            _ => {}
        }
    }
    measured
}

#[test]
fn failing_reports_fit_a_laptop_and_a_phone_in_chromium() {
    let Some(chromium) = chromium() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must have Chromium (.ci/run installs Debian's chromium package)"
        );
        eprintln!(
            "SKIPPED: no chromium on PATH. Install Debian's package (apt-get install chromium) or set \
             REPLAYLAB_CHROMIUM to a Chromium binary, then run this test again."
        );
        return;
    };
    let root = scratch("pages");
    let profile = root.join("profile");
    for (executor, scenario) in [("mutant:read_then_insert", "S05"), ("mutant:no_auth_recheck", "S08")] {
        let out = root.join(executor.replace(':', "-"));
        let status = installed::installed(REPLAYLAB, false)
            .args(["matrix", "--executor", executor, "--seeds", "20", "--out"])
            .arg(&out)
            .env("SOURCE_DATE_EPOCH", "1700000000")
            .env_remove("GITHUB_STEP_SUMMARY")
            .stdout(Stdio::null())
            .status()
            .expect("replaylab runs");
        assert_eq!(status.code(), Some(1), "{executor} fails its matrix");
        let html = std::fs::read_to_string(out.join("report.html")).expect("report.html");
        assert!(
            html.contains(&format!("<section class=\"scenario tone-fail\" id=\"{scenario}\">")),
            "{executor}: {scenario} fails"
        );
        let probe = out.join("probe.html");
        std::fs::write(&probe, html.replace("</body>", &format!("{PROBE}\n</body>")))
            .expect("the probe page");

        for width in WIDTHS {
            let dom = browse(&chromium, &profile, width, &["--dump-dom".to_owned()], &framed(&probe, width));
            let measured = measure(&dom);
            let at = format!("{executor} at {width} px");
            assert_eq!(measured.view, i64::from(width), "{at}: the page is laid out at that width");
            assert!(measured.page <= 0, "{at}: the page scrolls sideways by {} px", measured.page);
            assert!(
                measured.boxes.iter().any(|(section, ..)| section == scenario),
                "{at}: {scenario}'s failure box is on the page ({:?})",
                measured.boxes
            );
            for (section, past_screen, past_itself) in &measured.boxes {
                assert!(
                    *past_screen <= 0,
                    "{at}: {section}'s failure box reaches {past_screen} px past the screen"
                );
                assert!(
                    *past_itself <= 0,
                    "{at}: {section}'s failure box overflows its width by {past_itself} px"
                );
            }
            assert!(measured.marked >= 1, "{at}: the timeline marks the violating events");
            assert!(measured.wrong >= 1, "{at}: the operations table flags what an oracle names");
            assert_eq!(measured.broken, 0, "{at}: an id in the rows or scenarios table breaks mid-word");

            let shot = out.join(format!("{scenario}-{width}.png"));
            let page = framed(&out.join("report.html"), width);
            browse(&chromium, &profile, width, &[format!("--screenshot={}", shot.display())], &page);
            let png = std::fs::read(&shot).expect("the screenshot was written");
            assert!(png.starts_with(b"\x89PNG"), "{}: a PNG", shot.display());
        }
    }
}
