//! Reading a page's charts back from their SVG: a chart by its `data-chart`, its marks' values
//! and attributes, its axes' ticks with their places, and whether two labels of an axis overlap
//! (judged from the SVG's own coordinates, as the page has no script to measure them with).

/// The SVG of the chart `name` in `html`.
pub fn chart<'h>(html: &'h str, name: &str) -> &'h str {
    let start = html
        .find(&format!("data-chart=\"{name}\""))
        .unwrap_or_else(|| panic!("no chart {name}"));
    let end = start + html[start..].find("</svg>").unwrap();
    &html[start..end]
}

/// Each chart's SVG in `html`.
pub fn charts(html: &str) -> Vec<&str> {
    html.split("<svg ")
        .skip(1)
        .map(|svg| &svg[..svg.find("</svg>").unwrap()])
        .collect()
}

/// The value of the attribute `name` in the tag starting `tag`.
pub fn attribute<'t>(tag: &'t str, name: &str) -> Option<&'t str> {
    let tag = &tag[..tag.find('>').unwrap_or(tag.len())];
    let start = tag.find(&format!(" {name}=\""))? + name.len() + 3;
    Some(&tag[start..start + tag[start..].find('"')?])
}

/// The tags (from `<` to the end of the text) of the elements of class `class` in `svg`.
pub fn of_class<'s>(svg: &'s str, class: &str) -> Vec<&'s str> {
    let needle = format!("class=\"{class}\"");
    svg.match_indices(&needle)
        .map(|(at, _)| &svg[svg[..at].rfind('<').unwrap()..])
        .collect()
}

/// The marks' (`class="mark"`) tags.
pub fn marks(svg: &str) -> Vec<&str> {
    of_class(svg, "mark")
}

/// A number attribute of a tag.
pub fn number(tag: &str, name: &str) -> f64 {
    attribute(tag, name)
        .unwrap_or_else(|| panic!("no {name} in {tag:.200}"))
        .parse()
        .unwrap_or_else(|e| panic!("{name} of {tag:.200}: {e}"))
}

/// The text of the element starting at `tag`.
pub fn text(tag: &str) -> &str {
    let start = tag.find('>').unwrap() + 1;
    &tag[start..start + tag[start..].find('<').unwrap()]
}

/// A tick of an axis: its value, where it is (x across, y up), its label.
#[derive(Debug)]
pub struct Tick {
    pub value: f64,
    pub at: f64,
    pub label: String,
}

/// The ticks of the axis `axis` (`x` or `y`) of a chart.
pub fn ticks(svg: &str, axis: &str) -> Vec<Tick> {
    of_class(svg, &format!("tick-{axis}"))
        .into_iter()
        .map(|tag| Tick {
            value: number(tag, "data-tick"),
            at: number(tag, axis),
            label: text(tag).to_string(),
        })
        .collect()
}

/// The title of axis `axis` of a chart.
pub fn axis_title<'s>(svg: &'s str, axis: &str) -> &'s str {
    of_class(svg, "axis-title")
        .into_iter()
        .find(|tag| attribute(tag, "data-axis") == Some(axis))
        .map(text)
        .unwrap_or_else(|| panic!("no {axis} axis title"))
}

/// The width a browser's 11 px sans-serif gives `label`, at most: 0.6 em a character (digits
/// are 0.556 em in Arial and Liberation Sans, `µ` 0.576, lower-case letters less but `m`).
fn width(label: &str) -> f64 {
    label.chars().count() as f64 * 0.6 * 11.0
}

/// The first two labels of each axis of each chart that overlap: labels across are centred on
/// their ticks, so two overlap when their centres are closer than half their widths together;
/// labels up are a line of text high.
pub fn overlapping_labels(html: &str) -> Option<String> {
    for svg in charts(html) {
        let name = attribute(svg, "data-chart").unwrap_or("?");
        let across = ticks(svg, "x");
        for pair in across.windows(2) {
            if pair[1].at - pair[0].at < (width(&pair[0].label) + width(&pair[1].label)) / 2.0 {
                return Some(format!("{name}: {:?} and {:?}", pair[0], pair[1]));
            }
        }
        let up = ticks(svg, "y");
        for pair in up.windows(2) {
            if (pair[1].at - pair[0].at).abs() < 11.0 {
                return Some(format!("{name}: {:?} and {:?}", pair[0], pair[1]));
            }
        }
    }
    None
}

/// Whether the ticks' values are round and evenly stepped: a step of 1, 2 or 5 times a power of
/// ten, each tick a multiple of it.
pub fn round_steps(ticks: &[Tick]) -> bool {
    let values: Vec<f64> = ticks.iter().map(|t| t.value).collect();
    let Some(step) = values.windows(2).map(|w| w[1] - w[0]).next() else {
        return true;
    };
    let power = 10f64.powf(step.log10().floor());
    let mantissa = step / power;
    [1.0, 2.0, 5.0].iter().any(|m| (m - mantissa).abs() < 1e-6)
        && values
            .windows(2)
            .all(|w| ((w[1] - w[0]) - step).abs() < step * 1e-6)
        && values
            .iter()
            .all(|v| ((v / step) - (v / step).round()).abs() < 1e-6)
}

/// The legend's entries of a chart, each its swatch and text.
pub fn legend(svg: &str) -> Vec<&str> {
    of_class(svg, "legend")
        .into_iter()
        .map(|g| &g[..g.find("</g>").unwrap()])
        .collect()
}

/// The y values of the line `series` (its `data-series`) in the chart `svg`.
pub fn series(svg: &str, series: &str) -> Vec<f64> {
    let needle = format!("data-series=\"{series}\"");
    let at = svg
        .find(&needle)
        .unwrap_or_else(|| panic!("no series {series} in {svg:.300}"));
    let tag = &svg[svg[..at].rfind('<').unwrap()..];
    attribute(tag, "data-value")
        .unwrap_or_default()
        .split_whitespace()
        .map(|v| v.parse().unwrap())
        .collect()
}
