//! `dlio-rs report DIR --png`: each chart of a page as an SVG file and a PNG for slides, titled,
//! with its axis titles and legend (all inside the SVG). The PNG is drawn by a headless Chromium
//! (`chromium`, `chromium-browser` or `google-chrome` on PATH, or `DLIO_RS_BROWSER`): the same
//! renderer people view the page with, with the system's fonts, at twice the chart's size;
//! dlio-rs carries no rasterizer or font of its own (docs/running.md).
//!
//! A browser start costs about as much as the drawing, so one start draws a whole sheet: the
//! charts stacked at known offsets in one page, shot once, the shot cut into one PNG per chart.
//! A sheet is at most `SHEET_HEIGHT` pixels tall (its shot at most 1760 × 8000 pixels, ~42 MB
//! decoded); a page of more charts (many ranks' timelines) takes a start per sheet.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::error::{Error, Result};

/// The most CSS pixels of charts stacked in one sheet (twice that in the PNG's rows).
const SHEET_HEIGHT: u32 = 4000;
/// The device pixels per CSS pixel of the PNGs.
const SCALE: u32 = 2;

/// A chart cut out of the page: its file stem (`NN-NAME`), its SVG, its size, and where it sits
/// in its sheet.
struct Cut {
    stem: String,
    svg: String,
    width: u32,
    height: u32,
    top: u32,
}

/// Writes every chart of `page` into the folder `charts/` of the output folder `output` as
/// `NN-NAME.svg` and `NN-NAME.png` (never through a link planted there); returns the PNG files.
pub fn charts(page: &str, output: &Path) -> Result<Vec<PathBuf>> {
    let browser = browser()?;
    let charts = Path::new(crate::folder::CHARTS_DIR);
    let beneath = crate::folder::Beneath::open(output)
        .and_then(|b| b.make_folders(charts).map(|()| b))
        .map_err(|e| Error::io("cannot create the charts folder", &output.join(charts), e))?;
    let folder = &output.join(charts);
    let mut sheets: Vec<Vec<Cut>> = Vec::new();
    let mut filled = SHEET_HEIGHT;
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
        if filled + height > SHEET_HEIGHT {
            sheets.push(Vec::new());
            filled = 0;
        }
        if let Some(sheet) = sheets.last_mut() {
            sheet.push(Cut {
                stem,
                svg,
                width,
                height,
                top: filled,
            });
        }
        filled += height;
    }
    let mut written = Vec::new();
    for (n, sheet) in sheets.iter().enumerate() {
        // Hidden names, which no earlier `--png` leaves: removed first, so that a link planted
        // there is not followed, and afterwards whether the drawing worked or not.
        let page_name = charts.join(format!(".sheet-{n}.html"));
        let shot_name = charts.join(format!(".sheet-{n}.png"));
        let drawn = draw_sheet(&browser, &beneath, folder, sheet, (&page_name, &shot_name));
        for name in [&page_name, &shot_name] {
            let _ = beneath.remove_file(name);
        }
        written.extend(drawn?);
    }
    Ok(written)
}

/// Draws the charts of one sheet with one browser start, and cuts the shot into their PNGs.
fn draw_sheet(
    browser: &Path,
    beneath: &crate::folder::Beneath,
    folder: &Path,
    sheet: &[Cut],
    (page_name, shot_name): (&Path, &Path),
) -> Result<Vec<PathBuf>> {
    let width = sheet.iter().map(|c| c.width).max().unwrap_or(880);
    let height: u32 = sheet.iter().map(|c| c.height).sum();
    // Each chart a block at its offset, on white, with nothing around it.
    let mut html = String::from(
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><style>body{margin:0;\
         background:#fff}svg{display:block}</style></head><body>",
    );
    for cut in sheet {
        html.push_str(&cut.svg);
    }
    html.push_str("</body></html>\n");
    let page_path = folder.join(page_name.file_name().unwrap_or_default());
    let shot_path = folder.join(shot_name.file_name().unwrap_or_default());
    for name in [page_name, shot_name] {
        match beneath.remove_file(name) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(Error::io("cannot remove", &folder.join(name), e))
            }
            _ => {}
        }
    }
    beneath
        .create_file(page_name)
        .and_then(|mut file| std::io::Write::write_all(&mut file, html.as_bytes()))
        .map_err(|e| Error::io("cannot write", &page_path, e))?;
    let what = match (sheet.first(), sheet.last()) {
        (Some(first), Some(last)) if sheet.len() > 1 => {
            format!(
                "the charts {} to {} in {}",
                first.stem,
                last.stem,
                folder.display()
            )
        }
        _ => format!(
            "the chart {}",
            folder.join(format!("{}.png", sheet[0].stem)).display()
        ),
    };
    screenshot(browser, &page_path, &shot_path, (width, height), &what)?;
    let (info, pixels) = decode(&shot_path, browser)?;
    let channels = info.color_type.samples();
    let row = info.line_size;
    let mut written = Vec::new();
    for cut in sheet {
        let (x_bytes, top) = ((cut.width * SCALE) as usize * channels, cut.top * SCALE);
        let rows = cut.height * SCALE;
        if (top + rows) as usize * row > pixels.len() || x_bytes > row {
            return Err(Error::run(format!(
                "{} drew a {}×{} image for charts of {width}×{height} pixels",
                browser.display(),
                info.width,
                info.height
            )));
        }
        let mut image = Vec::with_capacity(x_bytes * rows as usize);
        for y in top..top + rows {
            let start = y as usize * row;
            image.extend_from_slice(&pixels[start..start + x_bytes]);
        }
        let png_path = folder.join(format!("{}.png", cut.stem));
        let name = Path::new(crate::folder::CHARTS_DIR).join(format!("{}.png", cut.stem));
        let failed = |e: std::io::Error| Error::io("cannot write", &png_path, e);
        let file = beneath.create_file(&name).map_err(failed)?;
        let mut encoder =
            ::png::Encoder::new(std::io::BufWriter::new(file), cut.width * SCALE, rows);
        encoder.set_color(info.color_type);
        encoder.set_depth(::png::BitDepth::Eight);
        encoder
            .write_header()
            .and_then(|mut out| {
                out.write_image_data(&image)?;
                out.finish()
            })
            .map_err(|e| failed(std::io::Error::other(e)))?;
        written.push(png_path);
    }
    Ok(written)
}

/// The browser's shot of a sheet, as 8-bit pixels.
fn decode(path: &Path, browser: &Path) -> Result<(::png::OutputInfo, Vec<u8>)> {
    let bytes = std::fs::read(path).map_err(|e| Error::io("cannot read", path, e))?;
    let failed = |e: ::png::DecodingError| {
        Error::run(format!(
            "{} drew {}, which cannot be read as a PNG image: {e}",
            browser.display(),
            path.display()
        ))
    };
    let mut decoder = ::png::Decoder::new(std::io::Cursor::new(bytes));
    // 8 bits per channel whatever the browser wrote (a palette, 16 bits), so that rows can be cut.
    decoder.set_transformations(::png::Transformations::EXPAND | ::png::Transformations::STRIP_16);
    let mut reader = decoder.read_info().map_err(failed)?;
    let mut pixels = vec![0; reader.output_buffer_size().unwrap_or(0)];
    let info = reader.next_frame(&mut pixels).map_err(failed)?;
    pixels.truncate(info.buffer_size());
    Ok((info, pixels))
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

/// How long one browser start may take to draw its sheet of charts (`DLIO_RS_BROWSER_TIMEOUT`,
/// seconds, else 60): a browser that hangs is stopped and named, never waited for forever.
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
                    "DLIO_RS_BROWSER_TIMEOUT={text}: give the seconds a browser may take to draw, \
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

/// Shoots the page `page` at `width`×`height` CSS pixels into `png`; `what` names the charts in
/// an error.
fn screenshot(
    browser: &Path,
    page: &Path,
    png: &Path,
    (width, height): (u32, u32),
    what: &str,
) -> Result<()> {
    let limit = drawing_limit()?;
    let page = page.canonicalize().unwrap_or(page.to_path_buf());
    let mut child = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            &format!("--force-device-scale-factor={SCALE}"),
            "--default-background-color=ffffffff",
            &format!("--window-size={width},{height}"),
            &format!("--screenshot={}", png.display()),
            &file_url(&page),
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
            "{} did not draw {what} within {:.1} s, and was stopped (DLIO_RS_BROWSER_TIMEOUT sets \
             the limit)",
            browser.display(),
            limit.as_secs_f64()
        ))),
        Some(status) if !status.success() || !drawn => Err(Error::run(format!(
            "{} did not draw {what}: {}",
            browser.display(),
            said.lines().last().unwrap_or(if drawn {
                "no message"
            } else {
                "no PNG image was written"
            })
        ))),
        Some(_) => Ok(()),
    }
}
