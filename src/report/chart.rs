//! The charts of every page (a run's, `compare`'s, a sweep's), as SVG: one drawing of the frame —
//! title, axes with round ticks (1-2-5 steps, powers of ten or of two on log scales), axis titles
//! with their units, a legend — and of the marks in it (bars, points, lines, a threshold), so
//! that every chart reads the same and no page draws an axis of its own. The title, axis titles
//! and legend are inside the SVG, so that a chart cut out for a slide (`report --png`) keeps them.
//!
//! Every mark carries its value in `data-value` (a test reads the picture's values there), and
//! tick labels are thinned until they fit their place: no two labels of an axis overlap at the
//! text width `CHAR_WIDTH` estimates. A chart with no data is not drawn ([`left_out`] says why).

use std::fmt::Write as _;

use super::html::escape;

/// The width of every chart, in CSS pixels.
const WIDTH: f64 = 880.0;
/// Where the plot area starts and ends across: room at the left for the y tick labels and the
/// y axis title, at the right for the last x tick label's half.
const LEFT: f64 = 70.0;
const RIGHT: f64 = WIDTH - 20.0;
/// The font size of all text but the title, in pixels.
const FONT: f64 = 11.0;
/// The width of a character of [`FONT`]'s sans-serif, taken generously (a digit is 0.56 em, `µ`
/// and most lower-case letters less, capitals more): labels spaced by it do not overlap.
const CHAR_WIDTH: f64 = 0.62 * FONT;
/// The least room between two tick labels of an axis, in pixels.
const LABEL_GAP: f64 = 8.0;

/// An epoch or trial that meets its criterion, and one that does not: a hue apart (blue and
/// vermilion, told apart with any colour vision), and each named in the legend.
pub const PASS_COLOR: &str = "#337ab7";
pub const FAIL_COLOR: &str = "#d55e00";
/// The parts of a step (waiting for data, computing, at the barrier and the rest), the bytes'
/// sources (storage, cache), and the second run of a comparison (amber beside the first's blue).
pub const LOAD_COLOR: &str = "#d9534f";
pub const COMPUTE_COLOR: &str = "#5cb85c";
pub const BARRIER_COLOR: &str = "#f0ad4e";
pub const STORAGE_COLOR: &str = "#337ab7";
pub const CACHE_COLOR: &str = "#aaaaaa";
/// A threshold's dashed line.
const RULE_COLOR: &str = "#b00";

/// How an axis places its values.
#[derive(Clone, Debug, PartialEq)]
enum Scale {
    Linear,
    /// Powers of two equally apart (accelerator counts: 1, 2, 4, 8).
    Log2,
    /// Powers of ten equally apart (latencies from microseconds to seconds).
    Log10,
    /// One slot per name, in order (checkpoint operations): slot `i` is at `i + 1`.
    Named(Vec<String>),
}

/// How tick values are written.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Labels {
    /// A number, large ones with k, M or G (10k): the axis title gives the unit.
    Number,
    /// Microseconds at their scale: `100 µs`, `1 ms`, `10 s`.
    Micros,
}

/// An axis: its title (with the unit: `time (s)`), its scale and how it extends.
#[derive(Clone, Debug)]
pub struct Axis {
    title: String,
    scale: Scale,
    labels: Labels,
    /// The axis ends here when every value is at most it (AU: 100 %); else at the round tick
    /// above the largest value.
    max: Option<f64>,
    /// The axis's fixed extent (epochs as slots: 0.5 to n + 0.5), its ticks the round values
    /// within; without one, the axis covers the values with round ticks at both ends.
    span: Option<(f64, f64)>,
    /// Ticks at whole numbers only (counts: epochs, accelerators).
    whole: bool,
}

impl Axis {
    pub fn linear(title: impl Into<String>) -> Axis {
        Axis::new(title.into(), Scale::Linear)
    }

    pub fn log2(title: impl Into<String>) -> Axis {
        Axis::new(title.into(), Scale::Log2)
    }

    pub fn log10(title: impl Into<String>) -> Axis {
        Axis::new(title.into(), Scale::Log10)
    }

    /// A slot per name, in order.
    pub fn named(title: impl Into<String>, names: Vec<String>) -> Axis {
        let span = (0.5, names.len() as f64 + 0.5);
        Axis::new(title.into(), Scale::Named(names)).span(span.0, span.1)
    }

    /// Numbered slots 1 to `n` (epochs): a linear axis of whole numbers from 0.5 to n + 0.5.
    pub fn slots(title: impl Into<String>, n: usize) -> Axis {
        Axis::linear(title).span(0.5, n as f64 + 0.5).whole()
    }

    fn new(title: String, scale: Scale) -> Axis {
        Axis {
            title,
            scale,
            labels: Labels::Number,
            max: None,
            span: None,
            whole: false,
        }
    }

    /// Ends at `max` when every value is at most it.
    pub fn up_to(mut self, max: f64) -> Axis {
        self.max = Some(max);
        self
    }

    /// Spans `lo` to `hi` whatever the values.
    pub fn span(mut self, lo: f64, hi: f64) -> Axis {
        self.span = Some((lo, hi));
        self
    }

    /// Ticks at whole numbers only.
    pub fn whole(mut self) -> Axis {
        self.whole = true;
        self
    }

    /// Values are microseconds, labelled at their scale (µs, ms, s).
    pub fn micros(mut self) -> Axis {
        self.labels = Labels::Micros;
        self
    }
}

/// How a legend entry is drawn.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Swatch {
    /// A filled box (bars, points).
    Fill,
    /// An empty box (a value not known, a trial not judged).
    Outline,
    /// A line (a series of a line chart).
    Line,
    /// A dashed line (a threshold).
    Rule,
}

/// A legend entry.
#[derive(Clone, Debug)]
pub struct Key {
    pub name: String,
    pub colour: &'static str,
    pub swatch: Swatch,
}

impl Key {
    pub fn fill(name: impl Into<String>, colour: &'static str) -> Key {
        Key {
            name: name.into(),
            colour,
            swatch: Swatch::Fill,
        }
    }

    pub fn outline(name: impl Into<String>, colour: &'static str) -> Key {
        Key {
            swatch: Swatch::Outline,
            ..Key::fill(name, colour)
        }
    }

    /// The entry of a threshold drawn by [`Canvas::rule`].
    pub fn rule(name: impl Into<String>) -> Key {
        Key {
            swatch: Swatch::Rule,
            ..Key::fill(name, RULE_COLOR)
        }
    }
}

/// A series of a line chart: its name (in the legend), its colour and its points, x ascending.
#[derive(Clone, Debug)]
pub struct Series {
    pub name: String,
    pub colour: &'static str,
    pub points: Vec<(f64, f64)>,
}

/// A chart before it is drawn: `name` is its `data-chart` (and its file's name in `--png`).
#[derive(Clone, Debug)]
pub struct Chart {
    name: String,
    title: String,
    x: Axis,
    y: Axis,
    legend: Vec<Key>,
    /// The plot area's height, in pixels.
    height: f64,
}

impl Chart {
    pub fn new(name: impl Into<String>, title: impl Into<String>, x: Axis, y: Axis) -> Chart {
        Chart {
            name: name.into(),
            title: title.into(),
            x,
            y,
            legend: Vec::new(),
            height: 180.0,
        }
    }

    /// The legend's entries (drawn only when there is more than one).
    pub fn legend(mut self, keys: Vec<Key>) -> Chart {
        self.legend = keys;
        self
    }

    /// The plot area's height in pixels.
    pub fn height(mut self, height: f64) -> Chart {
        self.height = height;
        self
    }

    /// The frame around values from `x` to `y` (each the smallest and the largest, marks'
    /// edges included): title, legend, axes with their ticks and titles, ready for marks.
    pub fn frame(self, x: (f64, f64), y: (f64, f64)) -> Canvas {
        let legend: &[Key] = if self.legend.len() > 1 {
            &self.legend
        } else {
            &[]
        };
        let rows = legend_rows(legend);
        let top = 34.0 + 18.0 * rows.len() as f64;
        let bottom = top + self.height;
        let total = bottom + 40.0;
        // Points and lines keep off the frame's edges; slots fill it.
        let inset = if self.x.span.is_some() { 0.0 } else { 10.0 };
        let px = place(&self.x, x, (LEFT + inset, RIGHT - inset), true);
        let py = place(&self.y, y, (bottom, top), false);
        let mut svg = String::new();
        let _ = write!(
            svg,
            "<svg data-chart=\"{name}\" role=\"img\" aria-label=\"{t}\" viewBox=\"0 0 {WIDTH} \
             {total:.0}\" width=\"{WIDTH}\" height=\"{total:.0}\" font-family=\"sans-serif\" \
             font-size=\"{FONT}\" xmlns=\"http://www.w3.org/2000/svg\"><title>{t}</title>\
             <text class=\"chart-title\" x=\"{LEFT}\" y=\"18\" font-size=\"14\" \
             font-weight=\"bold\">{t}</text>",
            name = escape(&self.name),
            t = escape(&self.title)
        );
        for (row, keys) in rows.iter().enumerate() {
            let y = 36.0 + 18.0 * row as f64;
            for (x, key) in keys {
                let swatch = match key.swatch {
                    Swatch::Fill => format!(
                        "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"10\" height=\"10\" fill=\"{}\"/>",
                        y - 9.0,
                        key.colour
                    ),
                    Swatch::Outline => format!(
                        "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"9\" height=\"9\" fill=\"none\" \
                         stroke=\"{}\" stroke-width=\"1.5\"/>",
                        x + 0.5,
                        y - 8.5,
                        key.colour
                    ),
                    Swatch::Line | Swatch::Rule => format!(
                        "<line x1=\"{x:.1}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"{}\" \
                         stroke-width=\"2\"{}/>",
                        x + 10.0,
                        y - 4.0,
                        y - 4.0,
                        key.colour,
                        match key.swatch {
                            Swatch::Rule => " stroke-dasharray=\"4 2\"",
                            _ => "",
                        }
                    ),
                };
                let _ = write!(
                    svg,
                    "<g class=\"legend\">{swatch}<text x=\"{:.1}\" y=\"{y:.1}\">{}</text></g>",
                    x + 14.0,
                    escape(&key.name)
                );
            }
        }
        // The y axis: a grid line and a label per tick, the title turned along the axis.
        for (value, label) in &py.ticks {
            let y = py.at(*value);
            let _ = write!(
                svg,
                "<line x1=\"{LEFT}\" x2=\"{RIGHT}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"#e5e5e5\"/>\
                 <text class=\"tick-y\" data-tick=\"{value}\" x=\"{:.1}\" y=\"{:.1}\" \
                 text-anchor=\"end\">{}</text>",
                LEFT - 5.0,
                y + 4.0,
                escape(label)
            );
        }
        // The x axis: a tick mark and a label per tick, the title below.
        for (value, label) in &px.ticks {
            let x = px.at(*value);
            let _ = write!(
                svg,
                "<line x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{bottom:.1}\" y2=\"{:.1}\" stroke=\"#888\"/>\
                 <text class=\"tick-x\" data-tick=\"{value}\" x=\"{:.1}\" y=\"{:.1}\" \
                 text-anchor=\"middle\">{}</text>",
                bottom + 4.0,
                centre(x, label, true),
                bottom + 15.0,
                escape(label)
            );
        }
        let _ = write!(
            svg,
            "<line x1=\"{LEFT}\" x2=\"{RIGHT}\" y1=\"{bottom:.1}\" y2=\"{bottom:.1}\" \
             stroke=\"#888\"/><line x1=\"{LEFT}\" x2=\"{LEFT}\" y1=\"{top:.1}\" y2=\"{bottom:.1}\" \
             stroke=\"#888\"/><text class=\"axis-title\" data-axis=\"x\" x=\"{:.1}\" y=\"{:.1}\" \
             text-anchor=\"middle\">{}</text><text class=\"axis-title\" data-axis=\"y\" \
             transform=\"rotate(-90)\" x=\"{:.1}\" y=\"14\" text-anchor=\"middle\">{}</text>",
            (LEFT + RIGHT) / 2.0,
            bottom + 32.0,
            escape(&self.x.title),
            -(top + bottom) / 2.0,
            escape(&self.y.title)
        );
        Canvas { svg, x: px, y: py }
    }

    /// A line chart of `series` (the line chart of a run's time series): `None` when no series
    /// has a point. Each series is one `polyline` with its y values in `data-value`, in order.
    pub fn lines(self, series: &[Series]) -> Option<String> {
        let points = || series.iter().flat_map(|s| s.points.iter());
        let x = extent(points().map(|p| p.0))?;
        let y = extent(points().map(|p| p.1))?;
        let keys = series
            .iter()
            .map(|s| Key {
                name: s.name.clone(),
                colour: s.colour,
                swatch: Swatch::Line,
            })
            .collect();
        let mut canvas = self.legend(keys).frame(x, y);
        for s in series {
            canvas.line(&s.name, &s.points, s.colour);
        }
        Some(canvas.finish())
    }
}

/// The smallest and largest of `values` (finite ones), `None` when there is none.
pub fn extent(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    values
        .filter(|v| v.is_finite())
        .fold(None, |span, v| match span {
            None => Some((v, v)),
            Some((lo, hi)) => Some((f64::min(lo, v), f64::max(hi, v))),
        })
}

/// What stands in the page for a chart with nothing to draw: the sentence saying why.
pub fn left_out(name: &str, why: &str) -> String {
    format!(
        "<p class=\"note\" data-left-out=\"{}\">{}</p>\n",
        escape(name),
        escape(why)
    )
}

/// A mark: what it is (`class`: `mark` for the values a test reads), its value, its colour and
/// its `<title>` (shown on hover, read by screen readers; none when empty).
#[derive(Clone, Copy, Debug, Default)]
pub struct Mark<'a> {
    pub class: &'a str,
    pub value: f64,
    pub colour: &'a str,
    pub title: &'a str,
    /// Drawn as an outline only (a value not known, a trial not judged).
    pub hollow: bool,
    /// More attributes, written as given (`data-run="A"`).
    pub attributes: &'a str,
}

impl Mark<'_> {
    fn open(&self, tag: &str) -> String {
        let paint = if self.hollow {
            format!(
                "fill=\"#fff\" stroke=\"{}\" stroke-width=\"1.5\"",
                self.colour
            )
        } else {
            format!("fill=\"{}\"", self.colour)
        };
        let mut out = format!(
            "<{tag} class=\"{}\" data-value=\"{}\" {paint}",
            self.class, self.value
        );
        if !self.attributes.is_empty() {
            let _ = write!(out, " {}", self.attributes);
        }
        out
    }

    fn close(&self, tag: &str) -> String {
        match self.title {
            "" => "/>".to_string(),
            title => format!("><title>{}</title></{tag}>", escape(title)),
        }
    }
}

/// A chart's frame, drawn, taking marks in the values' own units.
pub struct Canvas {
    svg: String,
    x: Placed,
    y: Placed,
}

impl Canvas {
    /// A bar from `x.0` to `x.1` across and from `y.0` to `y.1` up.
    /// A bar from 0 to `value` in slot `slot` (from 1) of a slotted x axis.
    pub fn slot_bar(&mut self, slot: usize, value: f64, mark: &Mark) {
        let at = slot as f64;
        self.bar((at - 0.35, at + 0.35), (0.0, value), mark);
    }

    pub fn bar(&mut self, x: (f64, f64), y: (f64, f64), mark: &Mark) {
        let (left, right) = (self.x.at(x.0), self.x.at(x.1));
        let (low, high) = (self.y.at(y.0), self.y.at(y.1));
        let _ = write!(
            self.svg,
            "{} x=\"{:.1}\" y=\"{:.1}\" width=\"{:.2}\" height=\"{:.1}\"{}",
            mark.open("rect"),
            left.min(right),
            high.min(low),
            (right - left).abs().max(0.5),
            (low - high).abs(),
            mark.close("rect")
        );
    }

    /// A point at (`x`, `y`); `ring` draws a dark ring around it (a sweep's answer).
    pub fn point(&mut self, x: f64, y: f64, mark: &Mark, ring: bool) {
        let (cx, cy) = (self.x.at(x), self.y.at(y));
        if ring {
            let _ = write!(
                self.svg,
                "<circle cx=\"{cx:.1}\" cy=\"{cy:.1}\" r=\"8\" fill=\"none\" stroke=\"#222\" \
                 stroke-width=\"2\"/>"
            );
        }
        let _ = write!(
            self.svg,
            "{} cx=\"{cx:.1}\" cy=\"{cy:.1}\" r=\"4.5\"{}",
            mark.open("circle"),
            mark.close("circle")
        );
    }

    /// A line through `points`, named `name`, their y values in `data-value`.
    pub fn line(&mut self, name: &str, points: &[(f64, f64)], colour: &str) {
        let mut at = String::new();
        let mut values = String::new();
        for &(x, y) in points.iter().filter(|p| p.0.is_finite() && p.1.is_finite()) {
            let _ = write!(at, "{:.1},{:.1} ", self.x.at(x), self.y.at(y));
            let _ = write!(values, "{y} ");
        }
        let _ = write!(
            self.svg,
            "<polyline class=\"series\" data-series=\"{}\" data-value=\"{}\" points=\"{}\" \
             fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\"><title>{}</title></polyline>",
            escape(name),
            values.trim_end(),
            at.trim_end(),
            escape(name)
        );
    }

    /// A dashed line across at `y` (a threshold), named `label` on hover; the legend names it
    /// ([`Key::rule`]), where no bar can hide the name.
    pub fn rule(&mut self, y: f64, label: &str) {
        let at = self.y.at(y);
        let _ = write!(
            self.svg,
            "<line class=\"rule\" data-value=\"{y}\" x1=\"{LEFT}\" x2=\"{RIGHT}\" y1=\"{at:.1}\" \
             y2=\"{at:.1}\" stroke=\"{RULE_COLOR}\" stroke-width=\"1.5\" stroke-dasharray=\"6 4\">\
             <title>{}</title></line>",
            escape(label)
        );
    }

    /// Opens a group of marks with `attributes` (written as given) and a `<title>` for all of
    /// them (none when empty), closed by [`Canvas::end_group`].
    pub fn group(&mut self, attributes: &str, title: &str) {
        let _ = write!(self.svg, "<g {attributes}>");
        if !title.is_empty() {
            let _ = write!(self.svg, "<title>{}</title>", escape(title));
        }
    }

    pub fn end_group(&mut self) {
        self.svg.push_str("</g>");
    }

    pub fn finish(mut self) -> String {
        self.svg.push_str("</svg>\n");
        self.svg
    }
}

/// An axis placed on the chart: its extent in values, in pixels, and its ticks.
#[derive(Debug)]
struct Placed {
    log: bool,
    lo: f64,
    hi: f64,
    from: f64,
    to: f64,
    ticks: Vec<(f64, String)>,
}

impl Placed {
    /// The pixel of `value` (one below a log axis's start is at its start).
    fn at(&self, value: f64) -> f64 {
        let share = if self.log {
            (value.max(self.lo).ln() - self.lo.ln()) / (self.hi.ln() - self.lo.ln())
        } else {
            (value - self.lo) / (self.hi - self.lo)
        };
        self.from + share * (self.to - self.from)
    }
}

/// Places `axis` for values from `data.0` to `data.1` between the pixels `pixels`; `across`
/// for an x axis (its labels side by side), else a y axis (labels one above the other).
fn place(axis: &Axis, data: (f64, f64), pixels: (f64, f64), across: bool) -> Placed {
    let length = (pixels.1 - pixels.0).abs();
    // Labels fit when two neighbours across are their half widths and a gap apart (where they
    // are drawn: kept inside the chart at its edges), or, up, a line of text and two gaps.
    let fits = |ticks: &[(f64, String)], placed: &dyn Fn(f64) -> f64| {
        ticks.windows(2).all(|w| {
            let (a, b) = (&w[0], &w[1]);
            let apart =
                (centre(placed(b.0), &b.1, across) - centre(placed(a.0), &a.1, across)).abs();
            match across {
                true => apart >= (text_width(&a.1) + text_width(&b.1)) / 2.0 + LABEL_GAP,
                false => apart >= FONT + 2.0 * LABEL_GAP,
            }
        })
    };
    let (lo, hi, log, ticks) = match &axis.scale {
        Scale::Named(names) => {
            let (lo, hi) = axis.span.unwrap_or((0.5, names.len() as f64 + 0.5));
            let slot = length / (hi - lo).max(1.0);
            let widest = names.iter().map(|n| text_width(n)).fold(0.0, f64::max);
            // Every `every`-th name, from as many as the widest allows, fewer until they fit.
            let mut every = ((widest + LABEL_GAP) / slot).ceil().max(1.0) as usize;
            let placed = |v: f64| pixels.0 + (v - lo) / (hi - lo) * (pixels.1 - pixels.0);
            let mut ticks = Vec::new();
            for _ in 0..64 {
                ticks = names
                    .iter()
                    .enumerate()
                    .step_by(every)
                    .map(|(i, n)| (i as f64 + 1.0, n.clone()))
                    .collect();
                if fits(&ticks, &placed) {
                    break;
                }
                every += every.div_ceil(2);
            }
            (lo, hi, false, ticks)
        }
        Scale::Linear => {
            let (lo, top) = match axis.span {
                Some(span) => span,
                None => {
                    let lo = data.0.min(0.0);
                    let top = match axis.max {
                        Some(max) if data.1 <= max => max,
                        _ => data.1,
                    };
                    (lo, if top > lo { top } else { lo + 1.0 })
                }
            };
            // From as many ticks as could fit at the least room, fewer until the labels fit.
            // At most 10 ticks across, fewer where their labels would not fit.
            let most =
                (length / (FONT + 2.0 * LABEL_GAP)).clamp(1.0, if across { 10.0 } else { 8.0 });
            let mut step = nice((top - lo) / most);
            if axis.whole {
                step = step.max(1.0);
            }
            let mut found = None;
            for _ in 0..64 {
                let (first, last) = match axis.span {
                    Some(_) => ((lo / step).ceil(), (top / step).floor()),
                    None if axis.max.is_some_and(|m| m == top) => {
                        ((lo / step).floor(), (top / step).floor())
                    }
                    None => ((lo / step).floor(), (top / step - 1e-9).ceil()),
                };
                let big = (first * step).abs().max((last * step).abs());
                let ticks: Vec<(f64, String)> = (first as i64..=last as i64)
                    .map(|i| i as f64 * step)
                    .map(|v| (v, label(axis.labels, v, step, big)))
                    .collect();
                let (a, b) = match axis.span {
                    Some(span) => span,
                    // A fixed top (AU's 100) stays; else the axis ends at its last tick.
                    None => (
                        first * step,
                        if axis.max.is_some_and(|m| m == top) {
                            top
                        } else {
                            last * step
                        },
                    ),
                };
                let placed = |v: f64| pixels.0 + (v - a) / (b - a) * (pixels.1 - pixels.0);
                let done = fits(&ticks, &placed);
                found = Some((a, b, ticks));
                if done {
                    break;
                }
                step = nice(step * 1.5);
            }
            let (a, b, ticks) = found.unwrap_or((lo, top, Vec::new()));
            (a, b, false, ticks)
        }
        Scale::Log2 | Scale::Log10 => {
            let base: f64 = if axis.scale == Scale::Log2 { 2.0 } else { 10.0 };
            // Below the least positive value a log axis has no place: values ≤ 0 sit at its start.
            let least = data.0.max(f64::MIN_POSITIVE);
            let (dlo, dhi) = (least, data.1.max(least));
            // Tick series, thinnest last: on a base-10 axis 1-2-5 per decade, then each decade,
            // then every 2nd, 3rd… decade; on a base-2 axis each power, then every 2nd, 4th…
            let series: Vec<(Vec<f64>, i32)> = match axis.scale {
                Scale::Log10 => {
                    let mut s = vec![(vec![1.0, 2.0, 5.0], 1)];
                    s.extend([1, 2, 3, 4, 5, 10].map(|k| (vec![1.0], k)));
                    s
                }
                _ => [1, 2, 4, 8, 16].map(|k| (vec![1.0], k)).to_vec(),
            };
            let mut found = None;
            for (multiples, every) in &series {
                let ticks_between = |a: f64, b: f64| -> Vec<f64> {
                    let first = (a.log(base) / *every as f64).floor() as i32 - 1;
                    let last = (b.log(base) / *every as f64).ceil() as i32 + 1;
                    (first..=last)
                        .flat_map(|k| {
                            let power = base.powi(k * every);
                            multiples.iter().map(move |m| m * power)
                        })
                        .collect()
                };
                let all = ticks_between(dlo, dhi);
                // Round ticks covering the values: the largest at or below the least, the smallest
                // at or above the largest.
                let tolerance = 1.0 + 1e-9;
                let a = all
                    .iter()
                    .copied()
                    .filter(|&t| t <= dlo * tolerance)
                    .fold(dlo, |_, t| t);
                let mut b = all
                    .iter()
                    .copied()
                    .find(|&t| t * tolerance >= dhi)
                    .unwrap_or(dhi);
                if b <= a {
                    b = all.iter().copied().find(|&t| t > a).unwrap_or(a * base);
                }
                let ticks: Vec<(f64, String)> = all
                    .iter()
                    .copied()
                    .filter(|&t| t >= a / tolerance && t <= b * tolerance)
                    .map(|t| (t, label(axis.labels, t, t, t)))
                    .collect();
                let placed =
                    |v: f64| pixels.0 + (v / a).ln() / (b / a).ln() * (pixels.1 - pixels.0);
                let done = fits(&ticks, &placed);
                found = Some((a, b, ticks));
                if done {
                    break;
                }
            }
            let (a, b, ticks) = found.unwrap_or((dlo, dhi * base, Vec::new()));
            (a, b, true, ticks)
        }
    };
    Placed {
        log,
        lo,
        hi,
        from: pixels.0,
        to: pixels.1,
        ticks,
    }
}

/// Where the label `label` of a tick at the pixel `at` is drawn: centred on its tick, but, across,
/// kept inside the chart (the last one of an axis reaching to the right edge would be cut).
fn centre(at: f64, label: &str, across: bool) -> f64 {
    let half = text_width(label) / 2.0 + 2.0;
    match across {
        true => at.min(WIDTH - half).max(half),
        false => at,
    }
}

/// The round step at or above `raw`: 1, 2 or 5 times a power of ten.
fn nice(raw: f64) -> f64 {
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let power = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * power)
        .find(|&s| s >= raw * (1.0 - 1e-9))
        .unwrap_or(10.0 * power)
}

/// A tick's label: `value` to the precision of `step`; `big` (the axis's largest value) picks
/// the k, M or G of plain numbers, so that one axis says them alike.
fn label(labels: Labels, value: f64, step: f64, big: f64) -> String {
    match labels {
        Labels::Number => {
            let (unit, suffix) = match big.abs() {
                b if b >= 1e10 => (1e9, "G"),
                b if b >= 1e7 => (1e6, "M"),
                b if b >= 1e4 => (1e3, "k"),
                _ => (1.0, ""),
            };
            match value {
                0.0 => "0".to_string(),
                _ => format!("{}{suffix}", trimmed(value / unit, step / unit)),
            }
        }
        Labels::Micros => {
            let (unit, name) = match value.abs() {
                v if v >= 1e6 => (1e6, "s"),
                v if v >= 1e3 => (1e3, "ms"),
                _ => (1.0, "µs"),
            };
            match value {
                0.0 => "0".to_string(),
                _ => format!("{} {name}", trimmed(value / unit, step / unit)),
            }
        }
    }
}

/// `value` with as many decimals as `step` needs, and no trailing zeros (1, not 1.0).
fn trimmed(value: f64, step: f64) -> String {
    let decimals = if step.is_finite() && step > 0.0 {
        (-step.log10().floor()).clamp(0.0, 9.0) as usize
    } else {
        0
    };
    let text = format!("{value:.decimals$}");
    let text = match text.contains('.') {
        true => text.trim_end_matches('0').trim_end_matches('.').to_string(),
        false => text,
    };
    match text.as_str() {
        "-0" => "0".to_string(),
        _ => text,
    }
}

/// The estimated width of `text` in pixels.
fn text_width(text: &str) -> f64 {
    text.chars().count() as f64 * CHAR_WIDTH
}

/// The legend's entries in rows that fit the width, each with its x.
fn legend_rows(keys: &[Key]) -> Vec<Vec<(f64, &Key)>> {
    let mut rows: Vec<Vec<(f64, &Key)>> = Vec::new();
    let mut x = LEFT;
    for key in keys {
        let width = 14.0 + text_width(&key.name) + 18.0;
        if rows.is_empty() || (x + width > WIDTH && x > LEFT) {
            rows.push(Vec::new());
            x = LEFT;
        }
        if let Some(row) = rows.last_mut() {
            row.push((x, key));
        }
        x += width;
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ticks(axis: &Axis, data: (f64, f64), across: bool) -> (Vec<f64>, Vec<String>) {
        let placed = place(
            axis,
            data,
            (0.0, if across { 790.0 } else { 180.0 }),
            across,
        );
        placed.ticks.into_iter().unzip()
    }

    #[test]
    fn value_axes_have_round_steps_that_cover_the_values() {
        let (values, labels) = ticks(&Axis::linear("y"), (0.0, 97.3), false);
        assert_eq!(values, [0.0, 20.0, 40.0, 60.0, 80.0, 100.0]);
        assert_eq!(labels, ["0", "20", "40", "60", "80", "100"]);
        // AU tops at 100 whatever its largest value below it.
        for top in [91.0, 99.0, 100.0] {
            let (values, _) = ticks(&Axis::linear("AU").up_to(100.0), (0.0, top), false);
            assert_eq!(values.last(), Some(&100.0), "{top}");
        }
        let (values, _) = ticks(&Axis::linear("AU").up_to(100.0), (0.0, 104.0), false);
        assert!(*values.last().unwrap() >= 104.0, "{values:?}");
        // Nothing but zeros: one unit, not 0.00 three times.
        let (_, labels) = ticks(&Axis::linear("y"), (0.0, 0.0), false);
        assert_eq!(labels.first().map(String::as_str), Some("0"));
        assert_eq!(labels.last().map(String::as_str), Some("1"));
        let (_, labels) = ticks(&Axis::linear("y"), (0.0, 0.034), false);
        assert!(labels.contains(&"0.01".to_string()), "{labels:?}");
        let (_, labels) = ticks(&Axis::linear("y"), (0.0, 48_000.0), false);
        assert!(labels.contains(&"20k".to_string()), "{labels:?}");
    }

    #[test]
    fn log_axes_are_labelled_at_their_scale() {
        let (values, labels) = ticks(&Axis::log10("latency").micros(), (3.4, 42_000.0), true);
        // Round (1, 2 or 5 times a power of ten), covering the values.
        assert_eq!(values.first(), Some(&2.0));
        assert_eq!(values.last(), Some(&50_000.0));
        assert!(values.iter().all(|v| {
            let mantissa = v / 10f64.powf(v.log10().floor());
            [1.0, 2.0, 5.0].iter().any(|m| (m - mantissa).abs() < 1e-9)
        }));
        for said in ["2 µs", "100 µs", "1 ms", "10 ms", "50 ms"] {
            assert!(labels.contains(&said.to_string()), "{said}: {labels:?}");
        }
        let (_, labels) = ticks(&Axis::log10("latency").micros(), (300.0, 3e6), true);
        assert!(labels.contains(&"1 s".to_string()), "{labels:?}");
        let (values, _) = ticks(&Axis::log2("accelerators"), (1.0, 48.0), true);
        assert_eq!(values, [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0]);
    }

    #[test]
    fn named_and_numbered_slots_thin_their_labels_to_fit() {
        let (values, _) = ticks(&Axis::slots("epoch", 1000), (0.5, 1000.5), true);
        assert!(values.len() > 3 && values.len() < 20, "{values:?}");
        assert!(values.iter().all(|v| v.fract() == 0.0));
        let names: Vec<String> = (0..300).map(|i| format!("save {i} r0")).collect();
        let (values, _) = ticks(&Axis::named("operation", names), (0.5, 300.5), true);
        assert!(values.len() < 30 && values[0] == 1.0, "{values:?}");
    }

    #[test]
    fn a_line_chart_draws_each_series_in_its_legend_and_none_without_points() {
        let series = |points: Vec<(f64, f64)>| {
            vec![
                Series {
                    name: "AU".into(),
                    colour: STORAGE_COLOR,
                    points: points.clone(),
                },
                Series {
                    name: "reads in flight".into(),
                    colour: LOAD_COLOR,
                    points: points.iter().map(|&(x, y)| (x, y / 10.0)).collect(),
                },
            ]
        };
        let chart = || {
            Chart::new(
                "run",
                "Over the run",
                Axis::linear("time (s)"),
                Axis::linear("AU (%)").up_to(100.0),
            )
        };
        let svg = chart()
            .lines(&series(vec![(0.0, 80.0), (1.5, 95.5), (3.0, 90.0)]))
            .unwrap();
        assert_eq!(svg.matches("class=\"legend\"").count(), 2);
        assert!(svg.contains("data-series=\"AU\" data-value=\"80 95.5 90\""));
        assert!(svg.contains("data-series=\"reads in flight\" data-value=\"8 9.55 9\""));
        assert!(svg.contains("data-axis=\"x\"") && svg.contains(">time (s)</text>"));
        assert!(svg.contains(">100</text>"), "{svg}");
        assert!(chart().lines(&series(Vec::new())).is_none());
    }

    #[test]
    fn labels_are_trimmed() {
        assert_eq!(label(Labels::Micros, 1000.0, 1000.0, 1000.0), "1 ms");
        assert_eq!(label(Labels::Micros, 2500.0, 500.0, 2500.0), "2.5 ms");
        assert_eq!(label(Labels::Number, 0.5, 0.5, 1.0), "0.5");
        assert_eq!(label(Labels::Number, 15_000.0, 5_000.0, 20_000.0), "15k");
    }
}
