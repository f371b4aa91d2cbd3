//! `dlio-rs report DIR --png`: each chart of a page as an SVG file and a PNG for slides. The PNG
//! is drawn by a headless Chromium (`chromium`, `chromium-browser` or `google-chrome` on PATH,
//! or `DLIO_RS_BROWSER`): the same renderer people view the page with, with the system's fonts,
//! at twice the chart's size; dlio-rs carries no rasterizer or font of its own (docs/running.md).

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::error::{Error, Result};

/// Writes every chart of `page` into the folder `charts/` of the output folder `output` as
/// `NN-NAME.svg` and `NN-NAME.png` (never through a link planted there); returns the PNG files.
pub fn charts(page: &str, output: &Path) -> Result<Vec<PathBuf>> {
    let browser = browser()?;
    let charts = Path::new(crate::folder::CHARTS_DIR);
    let beneath = crate::folder::Beneath::open(output)
        .and_then(|b| b.make_folders(charts).map(|()| b))
        .map_err(|e| Error::io("cannot create the charts folder", &output.join(charts), e))?;
    let folder = &output.join(charts);
    let mut written = Vec::new();
    for (i, svg) in page.split("<svg ").skip(1).enumerate() {
        let Some(end) = svg.find("</svg>") else {
            continue;
        };
        let svg = format!("<svg {}</svg>\n", &svg[..end]);
        let name = attribute(&svg, "data-chart").unwrap_or("chart");
        let width: u32 = attribute(&svg, "width")
            .and_then(|w| w.parse().ok())
            .unwrap_or(880);
        let height: u32 = attribute(&svg, "height")
            .and_then(|h| h.parse().ok())
            .unwrap_or(240);
        let stem = format!("{:02}-{name}", i + 1);
        let svg_path = folder.join(format!("{stem}.svg"));
        beneath
            .create_file(&charts.join(format!("{stem}.svg")))
            .and_then(|mut file| std::io::Write::write_all(&mut file, svg.as_bytes()))
            .map_err(|e| Error::on_object("cannot write", svg_path.display().to_string(), e))?;
        let png_path = folder.join(format!("{stem}.png"));
        screenshot(&browser, &svg_path, &png_path, width, height)?;
        written.push(png_path);
    }
    Ok(written)
}

/// The value of the first `name="…"` in `tag`.
fn attribute<'t>(tag: &'t str, name: &str) -> Option<&'t str> {
    let start = tag.find(&format!(" {name}=\""))? + name.len() + 3;
    let end = tag[start..].find('"')? + start;
    Some(&tag[start..end])
}

/// The browser to draw with.
fn browser() -> Result<PathBuf> {
    if let Some(chosen) = std::env::var_os("DLIO_RS_BROWSER") {
        if chosen.is_empty() {
            return Err(Error::usage(
                "DLIO_RS_BROWSER is set but empty: name a Chromium to draw the charts with, or \
                 unset it to look for chromium on PATH",
            ));
        }
        return Ok(PathBuf::from(chosen));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for name in ["chromium", "chromium-browser", "google-chrome"] {
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return Ok(candidate);
            }
        }
    }
    Err(Error::usage(
        "--png draws the charts with a headless Chromium, and none was found: install chromium \
         (Debian: apt install chromium) or name one with DLIO_RS_BROWSER; the page and the SVG \
         files need none",
    ))
}

/// How long one chart may take to draw (`DLIO_RS_BROWSER_TIMEOUT`, seconds, else 60): a browser
/// that hangs is stopped and named, never waited for forever.
fn drawing_limit() -> Result<std::time::Duration> {
    match std::env::var("DLIO_RS_BROWSER_TIMEOUT") {
        Err(_) => Ok(std::time::Duration::from_secs(60)),
        Ok(text) => text
            .parse::<f64>()
            .ok()
            .filter(|s| (0.1..=86400.0).contains(s))
            .map(std::time::Duration::from_secs_f64)
            .ok_or_else(|| {
                Error::usage(format!(
                    "DLIO_RS_BROWSER_TIMEOUT={text}: give the seconds a chart may take to draw, \
                     from 0.1 to 86400"
                ))
            }),
    }
}

/// A `file://` URL of `path`, every byte but the unreserved ones and `/` percent-encoded: a
/// folder named with `#`, `?`, `%` or a space is still the file's, not a fragment or a query.
fn file_url(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut url = String::from("file://");
    for &b in path.as_os_str().as_bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                url.push(b as char)
            }
            _ => url.push_str(&format!("%{b:02X}")),
        }
    }
    url
}

fn screenshot(browser: &Path, svg: &Path, png: &Path, width: u32, height: u32) -> Result<()> {
    let limit = drawing_limit()?;
    let svg = svg.canonicalize().unwrap_or(svg.to_path_buf());
    let mut child = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--force-device-scale-factor=2",
            "--default-background-color=ffffffff",
            &format!("--window-size={width},{height}"),
            &format!("--screenshot={}", png.display()),
            &file_url(&svg),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        // A group of its own: the browser's helper processes (a renderer, a GPU process) are
        // stopped with it, and none keeps its error pipe open past the limit.
        .process_group(0)
        .spawn()
        .map_err(|e| Error::on_object("cannot start", browser.display().to_string(), e))?;
    let group = child.id() as libc::pid_t;
    // Read aside, so that a browser with much to say never blocks on a full pipe.
    let (said_tx, said_rx) = std::sync::mpsc::channel();
    if let Some(mut pipe) = child.stderr.take() {
        std::thread::spawn(move || {
            let mut said = String::new();
            let _ = std::io::Read::read_to_string(&mut pipe, &mut said);
            let _ = said_tx.send(said);
        });
    }
    let deadline = std::time::Instant::now() + limit;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if std::time::Instant::now() >= deadline => {
                // SAFETY: a signal to the group this function started.
                unsafe { libc::kill(-group, libc::SIGKILL) };
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(std::time::Duration::from_millis(20)),
            Err(e) => {
                return Err(Error::on_object(
                    "cannot wait for",
                    browser.display().to_string(),
                    e,
                ))
            }
        }
    };
    // Whatever of the group outlived the browser goes too; its error text is waited for only
    // briefly.
    // SAFETY: a signal to the group this function started (ESRCH if it is gone).
    unsafe { libc::kill(-group, libc::SIGKILL) };
    let said = said_rx
        .recv_timeout(std::time::Duration::from_secs(1))
        .unwrap_or_default();
    let drawn = std::fs::read(png).is_ok_and(|bytes| bytes.starts_with(b"\x89PNG\r\n\x1a\n"));
    match status {
        None => Err(Error::run(format!(
            "{} did not draw {} within {:.1} s, and was stopped (DLIO_RS_BROWSER_TIMEOUT sets \
             the limit)",
            browser.display(),
            png.display(),
            limit.as_secs_f64()
        ))),
        Some(status) if !status.success() || !drawn => Err(Error::run(format!(
            "{} did not draw {}: {}",
            browser.display(),
            png.display(),
            said.lines().last().unwrap_or(if drawn {
                "no message"
            } else {
                "no PNG image was written"
            })
        ))),
        Some(_) => Ok(()),
    }
}
