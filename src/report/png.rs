//! `dlio-rs report DIR --png`: each chart of a page as an SVG file and a PNG for slides. The PNG
//! is drawn by a headless Chromium (`chromium`, `chromium-browser` or `google-chrome` on PATH,
//! or `DLIO_RS_BROWSER`): the same renderer people view the page with, with the system's fonts,
//! at twice the chart's size; dlio-rs carries no rasterizer or font of its own (docs/running.md).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::error::{Error, Result};

/// Writes every chart of `page` into `folder` as `NN-NAME.svg` and `NN-NAME.png`; returns the
/// PNG files.
pub fn charts(page: &str, folder: &Path) -> Result<Vec<PathBuf>> {
    let browser = browser()?;
    crate::folder::make_folder(folder, "the charts folder")?;
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
        std::fs::write(&svg_path, &svg)
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

fn screenshot(browser: &Path, svg: &Path, png: &Path, width: u32, height: u32) -> Result<()> {
    let ran = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--force-device-scale-factor=2",
            "--default-background-color=ffffffff",
            &format!("--window-size={width},{height}"),
            &format!("--screenshot={}", png.display()),
            &format!(
                "file://{}",
                svg.canonicalize().unwrap_or(svg.to_path_buf()).display()
            ),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| Error::on_object("cannot start", browser.display().to_string(), e))?;
    if !ran.status.success() || !png.is_file() {
        let said = String::from_utf8_lossy(&ran.stderr);
        return Err(Error::run(format!(
            "{} did not draw {}: {}",
            browser.display(),
            png.display(),
            said.lines().last().unwrap_or("no message")
        )));
    }
    Ok(())
}
