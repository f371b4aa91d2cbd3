//! An untyped configuration tree read the way DLIO reads YAML: as YAML 1.1 (PyYAML / OmegaConf),
//! where the plain scalars `off`, `on`, `yes`, `no` are booleans. Quoted scalars stay strings.
//!
//! The tree keeps mapping order, so the configuration we save (`config.yaml`) reads like the input.

use std::fmt::Write as _;

use std::collections::HashMap;
use std::sync::OnceLock;

use regex_lite::Regex;
use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser, Tag};
use yaml_rust2::scanner::{Marker, Scanner, TScalarStyle, Token, TokenType};

#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    List(Vec<Value>),
    Map(Vec<(String, Value)>),
}

impl Value {
    pub fn empty_map() -> Value {
        Value::Map(Vec::new())
    }

    /// A short name of the value's type, for error messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "boolean",
            Value::Int(_) => "integer",
            Value::Float(_) => "number",
            Value::Str(_) => "string",
            Value::List(_) => "list",
            Value::Map(_) => "mapping",
        }
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Map(entries) => entries.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// Every scalar or list of the tree with its dotted path, in the tree's order; an empty
    /// mapping is a leaf.
    pub fn leaves(&self) -> Vec<(String, &Value)> {
        fn walk<'a>(tree: &'a Value, prefix: String, out: &mut Vec<(String, &'a Value)>) {
            match tree {
                Value::Map(entries) if !entries.is_empty() => {
                    for (key, value) in entries {
                        let path = if prefix.is_empty() {
                            key.clone()
                        } else {
                            format!("{prefix}.{key}")
                        };
                        walk(value, path, out);
                    }
                }
                _ => out.push((prefix, tree)),
            }
        }
        let mut out = Vec::new();
        walk(self, String::new(), &mut out);
        out
    }

    /// The value at a dotted path of mapping keys.
    pub fn get_path(&self, path: &[&str]) -> Option<&Value> {
        path.iter().try_fold(self, |node, key| node.get(key))
    }

    /// Sets the value at `path`, creating intermediate mappings. A scalar (or null) on the way
    /// becomes a mapping, as OmegaConf merges Hydra's `++a.b=v` over `a: 1.0` into `a: {b: v}`
    /// (DLIO's tests give `computation_time.type=uniform` that way, over the default's number).
    /// Fails (returning the prefix that is a list) when a list is on the way.
    pub fn set_path(&mut self, path: &[&str], value: Value) -> Result<(), String> {
        let (last, parents) = path.split_last().expect("non-empty path");
        let mut node = self;
        for (depth, key) in parents.iter().enumerate() {
            if !matches!(node, Value::Map(_) | Value::List(_)) {
                *node = Value::empty_map();
            }
            let Value::Map(entries) = node else {
                return Err(path[..depth].join("."));
            };
            let index = match entries.iter().position(|(k, _)| k == key) {
                Some(i) => i,
                None => {
                    entries.push((key.to_string(), Value::empty_map()));
                    entries.len() - 1
                }
            };
            node = &mut entries[index].1;
        }
        if !matches!(node, Value::Map(_) | Value::List(_)) {
            *node = Value::empty_map();
        }
        let Value::Map(entries) = node else {
            return Err(parents.join("."));
        };
        match entries.iter_mut().find(|(k, _)| k == last) {
            Some((_, slot)) => *slot = value,
            None => entries.push((last.to_string(), value)),
        }
        Ok(())
    }

    /// Removes the value at `path`; returns whether it existed.
    pub fn remove_path(&mut self, path: &[&str]) -> bool {
        let (last, parents) = path.split_last().expect("non-empty path");
        let mut node = self;
        for key in parents {
            match node {
                Value::Map(entries) => match entries.iter_mut().find(|(k, _)| k == key) {
                    Some((_, child)) => node = child,
                    None => return false,
                },
                _ => return false,
            }
        }
        match node {
            Value::Map(entries) => {
                let before = entries.len();
                entries.retain(|(k, _)| k != last);
                entries.len() != before
            }
            _ => false,
        }
    }

    /// Parses one YAML document as OmegaConf reads a file (an empty document is an empty
    /// mapping); what OmegaConf would refuse, or read otherwise than dlio-rs can, is refused with
    /// the line and the reason.
    pub fn from_yaml(text: &str) -> Result<Value, String> {
        // PyYAML skips a byte-order mark.
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        refuse_what_pyyaml_refuses(text)?;
        let mut builder = TreeBuilder::default();
        Parser::new_from_str(text)
            .load(&mut builder, true)
            .map_err(|e| e.to_string())?;
        if let Some(message) = builder.error {
            return Err(message);
        }
        Ok(builder.root.unwrap_or_else(Value::empty_map))
    }

    /// The value as Python's `str` writes it: how a key that is not a string (`1`, `true`)
    /// reads once OmegaConf or Hydra has kept it.
    pub fn python_str(&self) -> String {
        match self {
            Value::Str(s) => s.clone(),
            Value::Bool(true) => "True".into(),
            Value::Bool(false) => "False".into(),
            Value::Null => "None".into(),
            Value::Int(i) => i.to_string(),
            Value::Float(f) if f.is_nan() => "nan".into(),
            Value::Float(f) if f.is_infinite() => if *f > 0.0 { "inf" } else { "-inf" }.into(),
            Value::Float(f) => float_yaml(*f),

            collection => collection.to_flow_yaml(),
        }
    }

    /// Flow-style YAML on one line: `{mean: 0.5, stdev: 0.1}`.
    pub fn to_flow_yaml(&self) -> String {
        scalar_yaml(self)
    }

    /// Block-style YAML, as Hydra writes it.
    pub fn to_yaml(&self) -> String {
        let mut out = String::new();
        match self {
            Value::Map(entries) if entries.is_empty() => out.push_str("{}\n"),
            Value::List(items) if items.is_empty() => out.push_str("[]\n"),
            Value::Map(_) | Value::List(_) => write_block(&mut out, self, 0),
            scalar => {
                out.push_str(&scalar_yaml(scalar));
                out.push('\n');
            }
        }
        out
    }

    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Value::Null => serde_json::Value::Null,
            Value::Bool(b) => serde_json::Value::Bool(*b),
            Value::Int(i) => serde_json::Value::from(*i),
            Value::Float(f) => serde_json::Number::from_f64(*f)
                .map(serde_json::Value::Number)
                .unwrap_or_else(|| serde_json::Value::String(f.to_string())),
            Value::Str(s) => serde_json::Value::String(s.clone()),
            Value::List(items) => {
                serde_json::Value::Array(items.iter().map(Value::to_json).collect())
            }
            Value::Map(entries) => serde_json::Value::Object(
                entries
                    .iter()
                    .map(|(k, v)| (k.clone(), v.to_json()))
                    .collect(),
            ),
        }
    }

    /// The tree [`Value::to_json`] saved (e.g. `report.json`'s `configuration`), read back.
    /// JSON cannot hold a non-finite float, so `to_json` saved those as strings, and strings they
    /// stay; integers beyond i64 (which `to_json` never writes) become floats.
    pub fn from_json(json: &serde_json::Value) -> Value {
        match json {
            serde_json::Value::Null => Value::Null,
            serde_json::Value::Bool(b) => Value::Bool(*b),
            serde_json::Value::Number(n) => match n.as_i64() {
                Some(i) => Value::Int(i),
                None => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
            },
            serde_json::Value::String(s) => Value::Str(s.clone()),
            serde_json::Value::Array(items) => {
                Value::List(items.iter().map(Value::from_json).collect())
            }
            serde_json::Value::Object(entries) => Value::Map(
                entries
                    .iter()
                    .map(|(k, v)| (k.clone(), Value::from_json(v)))
                    .collect(),
            ),
        }
    }
}

/// PyYAML's and OmegaConf's implicit resolvers of plain scalars, their regular expressions
/// copied as they are, in the order PyYAML tries them: `bool`, PyYAML's `float`, `int`, `null`,
/// then the `float` OmegaConf adds (exponents without a dot, `1e-3`). OmegaConf drops PyYAML's
/// `timestamp`, so dates stay strings.
struct Resolvers {
    boolean: Regex,
    yaml_float: Regex,
    int: Regex,
    null: Regex,
    omegaconf_float: Regex,
}

fn resolvers() -> &'static Resolvers {
    static RESOLVERS: OnceLock<Resolvers> = OnceLock::new();
    RESOLVERS.get_or_init(|| {
        let re = |pattern: &str| Regex::new(pattern).expect("a fixed, valid expression");
        Resolvers {
            boolean: re(r"^(?x:yes|Yes|YES|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF)$"),
            yaml_float: re(r"^(?x:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?
                |\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?
                |[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*
                |[-+]?\.(?:inf|Inf|INF)
                |\.(?:nan|NaN|NAN))$"),
            int: re(r"^(?x:[-+]?0b[0-1_]+
                |[-+]?0[0-7_]+
                |[-+]?(?:0|[1-9][0-9_]*)
                |[-+]?0x[0-9a-fA-F_]+
                |[-+]?[1-9][0-9_]*(?::[0-5]?[0-9])+)$"),
            null: re(r"^(?x:~|null|Null|NULL|)$"),
            omegaconf_float: re(r"^(?x:[-+]?[0-9]+(?:_[0-9]+)*\.[0-9_]*(?:[eE][-+]?[0-9]+)?
                |[-+]?[0-9]+(?:_[0-9]+)*(?:[eE][-+]?[0-9]+)
                |\.[0-9]+(?:_[0-9]+)*(?:[eE][-+][0-9]+)?
                |[-+]?[0-9]+(?:_[0-9]+)*(?::[0-5]?[0-9])+\.[0-9_]*
                |[-+]?\.(?:inf|Inf|INF)
                |\.(?:nan|NaN|NAN))$"),
        }
    })
}

/// Resolves a plain (unquoted) scalar as OmegaConf's YAML loader does (YAML 1.1: `off` is false,
/// `017` is 15, `1:30` is 90). Fails only for an integer beyond 64 bits, which Python would keep
/// whole and dlio-rs cannot.
fn resolve_plain(text: &str) -> Result<Value, String> {
    let r = resolvers();
    Ok(if r.boolean.is_match(text) {
        Value::Bool(
            matches!(text.as_bytes()[0], b'y' | b'Y' | b't' | b'T')
                || text.eq_ignore_ascii_case("on"),
        )
    } else if r.yaml_float.is_match(text) {
        Value::Float(construct_float(text))
    } else if r.int.is_match(text) {
        Value::Int(construct_int(text)?)
    } else if r.null.is_match(text) {
        Value::Null
    } else if r.omegaconf_float.is_match(text) {
        Value::Float(construct_float(text))
    } else {
        Value::Str(text.to_string())
    })
}

/// PyYAML's `construct_yaml_int`: underscores dropped, then binary, hex, octal (a leading 0),
/// base 60 (`1:30`) or decimal.
fn construct_int(text: &str) -> Result<i64, String> {
    let digits: String = text.chars().filter(|&c| c != '_').collect();
    let (negative, digits) = match digits.as_bytes().first() {
        Some(b'-') => (true, &digits[1..]),
        Some(b'+') => (false, &digits[1..]),
        _ => (false, &digits[..]),
    };
    let magnitude: Option<i128> = if digits == "0" {
        Some(0)
    } else if let Some(binary) = digits.strip_prefix("0b") {
        i128::from_str_radix(binary, 2).ok()
    } else if let Some(hex) = digits.strip_prefix("0x") {
        i128::from_str_radix(hex, 16).ok()
    } else if digits.starts_with('0') {
        i128::from_str_radix(digits, 8).ok()
    } else if digits.contains(':') {
        digits.split(':').try_fold(0i128, |value, part| {
            value
                .checked_mul(60)?
                .checked_add(part.parse::<i128>().ok()?)
        })
    } else {
        digits.parse::<i128>().ok()
    };
    magnitude
        .map(|m| if negative { -m } else { m })
        .and_then(|v| i64::try_from(v).ok())
        .ok_or_else(|| {
            format!("{text} is too large an integer (dlio-rs takes integers of 64 bits: ±9223372036854775807)")
        })
}

/// PyYAML's `construct_yaml_float`: underscores dropped, `.inf`, `.nan`, base 60, or decimal.
fn construct_float(text: &str) -> f64 {
    let value: String = text
        .chars()
        .filter(|&c| c != '_')
        .collect::<String>()
        .to_lowercase();
    let (sign, value) = match value.as_bytes().first() {
        Some(b'-') => (-1.0, &value[1..]),
        Some(b'+') => (1.0, &value[1..]),
        _ => (1.0, &value[..]),
    };
    let magnitude = match value {
        ".inf" => f64::INFINITY,
        ".nan" => return f64::NAN,
        sexagesimal if sexagesimal.contains(':') => {
            sexagesimal.split(':').fold(0.0, |acc, part| {
                acc * 60.0 + part.parse::<f64>().unwrap_or(f64::NAN)
            })
        }
        decimal => decimal.parse::<f64>().unwrap_or(f64::NAN),
    };
    sign * magnitude
}

/// Refuses what PyYAML refuses and a YAML 1.2 reader takes: a tab anywhere but in quoted text,
/// block scalars and comments (PyYAML's scanner takes only spaces between tokens, and ends plain
/// scalars at a tab), and anchor names of other characters than letters, digits, `_` and `-`.
fn refuse_what_pyyaml_refuses(text: &str) -> Result<(), String> {
    let chars: Vec<char> = text.chars().collect();
    // Where a tab may stand: [start, end) in characters.
    let mut allowed: Vec<(usize, usize)> = Vec::new();
    let tokens: Vec<Token> = Scanner::new(text.chars()).collect();
    // The scanner counts characters; its last marks may lie past the end.
    let at = |mark: &Marker| mark.index().min(chars.len());
    for (i, Token(mark, kind)) in tokens.iter().enumerate() {
        let start = at(mark);
        match kind {
            TokenType::Scalar(TScalarStyle::SingleQuoted | TScalarStyle::DoubleQuoted, _) => {
                allowed.push((start, closing_quote(&chars, start)));
            }
            TokenType::Scalar(TScalarStyle::Literal | TScalarStyle::Folded, _) => {
                // Its lines, not its header (`|`, `>-`, `|2`).
                let end = tokens
                    .get(i + 1)
                    .map_or(chars.len(), |t| at(&t.0))
                    .max(start);
                let lines = chars[start..end]
                    .iter()
                    .position(|&c| c == '\n')
                    .map_or(end, |n| start + n);
                allowed.push((lines, end));
            }
            TokenType::Anchor(name) | TokenType::Alias(name)
                if !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') =>
            {
                return Err(format!(
                    "line {}: the anchor or alias name {name:?} has other characters than \
                     letters, digits, _ and - (PyYAML refuses it)",
                    mark.line()
                ));
            }
            _ => {}
        }
    }
    let inside = |at: usize| allowed.iter().any(|&(start, end)| start <= at && at < end);
    let mut line = 1;
    let mut comment = false;
    for (at, &c) in chars.iter().enumerate() {
        match c {
            '\n' => {
                line += 1;
                comment = false;
            }
            '#' if !inside(at) && (at == 0 || chars[at - 1].is_whitespace()) => comment = true,
            '\t' if !comment && !inside(at) => {
                return Err(format!(
                    "line {line}: a tab, which YAML 1.1 readers (PyYAML, so DLIO) refuse outside \
                     quoted text; indent and separate with spaces"
                ))
            }
            _ => {}
        }
    }
    Ok(())
}

/// Where the quoted scalar starting at `start` ends (after its closing quote): `''` is a quote in
/// single quotes, `\"` in double quotes.
fn closing_quote(chars: &[char], start: usize) -> usize {
    let quote = chars[start];
    let mut at = start + 1;
    while at < chars.len() {
        match chars[at] {
            '\\' if quote == '"' => at += 2,
            '\'' if quote == '\'' && chars.get(at + 1) == Some(&'\'') => at += 2,
            c if c == quote => return at + 1,
            _ => at += 1,
        }
    }
    chars.len()
}

/// How deep mappings and lists may nest: DLIO's files nest three levels; a file nested deeper
/// than this is not a configuration.
const MAX_DEPTH: usize = 64;

/// How many values a file may make, aliases expanded: an "alias bomb" (aliases of aliases, each
/// doubling the tree) would otherwise take all memory.
const MAX_VALUES: usize = 1 << 20;

enum Frame {
    List(Vec<Value>),
    Map {
        entries: Vec<(String, Value)>,
        pending_key: Option<String>,
        /// The mappings merged in with `<<` (YAML 1.1's merge key), in order.
        merged: Vec<Value>,
        /// Whether the pending key is `<<`.
        merging: bool,
    },
}

#[derive(Default)]
struct TreeBuilder {
    stack: Vec<Frame>,
    root: Option<Value>,
    anchors: HashMap<usize, Value>,
    pending_anchor: Vec<usize>,
    error: Option<String>,
    documents: usize,
    /// Values made so far, aliases expanded.
    made: usize,
}

/// The number of values in `value`, itself included.
fn size(value: &Value) -> usize {
    match value {
        Value::List(items) => 1 + items.iter().map(size).sum::<usize>(),
        Value::Map(entries) => 1 + entries.iter().map(|(_, v)| size(v)).sum::<usize>(),
        _ => 1,
    }
}

impl TreeBuilder {
    fn fail(&mut self, mark: Marker, message: String) {
        if self.error.is_none() {
            self.error = Some(format!("line {}: {message}", mark.line()));
        }
    }

    fn push_value(&mut self, value: Value, anchor: usize, mark: Marker) {
        if anchor > 0 {
            self.anchors.insert(anchor, value.clone());
        }
        match self.stack.last_mut() {
            None => self.root = Some(value),
            Some(Frame::List(items)) => items.push(value),
            Some(Frame::Map {
                entries,
                pending_key,
                merged,
                merging,
            }) => match pending_key.take() {
                None => match value {
                    Value::Str(key) => *pending_key = Some(key),
                    Value::List(_) | Value::Map(_) => {
                        self.fail(mark, "a list or mapping cannot be a key".into());
                    }
                    other => *pending_key = Some(other.python_str()),
                },
                Some(_) if std::mem::take(merging) => match value {
                    Value::Map(_) => merged.push(value),
                    Value::List(maps) if maps.iter().all(|m| matches!(m, Value::Map(_))) => {
                        merged.extend(maps)
                    }
                    _ => self.fail(
                        mark,
                        "a merge key (<<) takes a mapping or a list of mappings".into(),
                    ),
                },
                Some(key) => {
                    // OmegaConf refuses what PyYAML would let pass (the last value winning).
                    if entries.iter().any(|(k, _)| *k == key) {
                        self.fail(mark, format!("duplicate key {key}"));
                    } else {
                        entries.push((key, value));
                    }
                }
            },
        }
    }

    /// A mapping's entries with what `<<` merged in: merged keys first, earlier merges winning,
    /// and the mapping's own keys over all, as PyYAML's `flatten_mapping` makes them.
    fn with_merged(entries: Vec<(String, Value)>, merged: Vec<Value>) -> Vec<(String, Value)> {
        if merged.is_empty() {
            return entries;
        }
        let mut out: Vec<(String, Value)> = Vec::new();
        for map in merged.into_iter().rev() {
            let Value::Map(merged_entries) = map else {
                continue;
            };
            for (key, value) in merged_entries {
                match out.iter_mut().find(|(k, _)| *k == key) {
                    Some((_, slot)) => *slot = value,
                    None => out.push((key, value)),
                }
            }
        }
        for (key, value) in entries {
            match out.iter_mut().find(|(k, _)| *k == key) {
                Some((_, slot)) => *slot = value,
                None => out.push((key, value)),
            }
        }
        out
    }

    fn open(&mut self, frame: Frame, anchor: usize, tag: Option<Tag>, mark: Marker) {
        if let Some(tag) = tag.filter(|t| !is_core_collection_tag(t)) {
            self.fail(
                mark,
                format!(
                    "the tag {} is not supported (OmegaConf reads plain YAML)",
                    tag_text(&tag)
                ),
            );
        }
        if self.stack.len() >= MAX_DEPTH {
            self.fail(mark, format!("nested deeper than {MAX_DEPTH} levels"));
        }
        self.pending_anchor.push(anchor);
        self.stack.push(frame);
    }

    fn count(&mut self, values: usize, mark: Marker) -> bool {
        self.made = self.made.saturating_add(values);
        if self.made > MAX_VALUES {
            self.fail(
                mark,
                format!("more than {MAX_VALUES} values, aliases expanded (an alias bomb?)"),
            );
            return false;
        }
        true
    }
}

/// A tag as it was written: `!!binary`, `!custom`.
fn tag_text(tag: &Tag) -> String {
    match tag.handle.as_str() {
        "tag:yaml.org,2002:" => format!("!!{}", tag.suffix),
        handle => format!("{handle}{}", tag.suffix),
    }
}

/// `!!map` and `!!seq`, which change nothing.
fn is_core_collection_tag(tag: &Tag) -> bool {
    tag.handle == "tag:yaml.org,2002:" && matches!(tag.suffix.as_str(), "map" | "seq")
        || tag.handle == "!!" && matches!(tag.suffix.as_str(), "map" | "seq")
}

/// A scalar with an explicit core tag (`!!str 5`, `!!int "5"`), as PyYAML's safe constructors
/// make it; other tags are refused.
fn tagged_scalar(text: String, tag: &Tag) -> Result<Value, String> {
    // The non-specific tag `!`: a string, not resolved (an empty one is null, as PyYAML has it).
    if tag.handle.is_empty() && tag.suffix == "!" {
        return Ok(if text.is_empty() {
            Value::Null
        } else {
            Value::Str(text)
        });
    }
    let core = tag.handle == "!!" || tag.handle == "tag:yaml.org,2002:";
    let resolved = || resolve_plain(&text);
    match (core, tag.suffix.as_str()) {
        (true, "str") => Ok(Value::Str(text)),
        (true, "int") => match resolved()? {
            Value::Int(i) => Ok(Value::Int(i)),
            _ => Err(format!("!!int {text:?} is not an integer")),
        },
        (true, "float") => match resolved()? {
            Value::Float(f) => Ok(Value::Float(f)),
            Value::Int(i) => Ok(Value::Float(i as f64)),
            _ => Err(format!("!!float {text:?} is not a number")),
        },
        (true, "bool") => match resolved()? {
            Value::Bool(b) => Ok(Value::Bool(b)),
            _ => Err(format!("!!bool {text:?} is not a boolean")),
        },
        (true, "null") => Ok(Value::Null),
        _ => Err(format!(
            "the tag {} is not supported (OmegaConf reads plain YAML)",
            tag_text(tag)
        )),
    }
}

impl MarkedEventReceiver for TreeBuilder {
    fn on_event(&mut self, event: Event, mark: Marker) {
        if self.error.is_some() {
            return;
        }
        match event {
            Event::DocumentStart => {
                self.documents += 1;
                if self.documents > 1 {
                    self.fail(
                        mark,
                        "a second YAML document (---): a workload file holds one, as \
                         OmegaConf reads it"
                            .into(),
                    );
                }
            }
            Event::Scalar(text, style, anchor, tag) => {
                if !self.count(1, mark) {
                    return;
                }
                let is_key = matches!(
                    self.stack.last(),
                    Some(Frame::Map {
                        pending_key: None,
                        ..
                    })
                );
                let value = match (tag, style) {
                    (Some(tag), _) => tagged_scalar(text, &tag),
                    (None, TScalarStyle::Plain) if is_key && text == "<<" => {
                        if let Some(Frame::Map {
                            merging,
                            pending_key,
                            ..
                        }) = self.stack.last_mut()
                        {
                            *merging = true;
                            *pending_key = Some(text);
                        }
                        return;
                    }
                    (None, TScalarStyle::Plain) if text == "<<" => {
                        Err("the merge key << stands only as a key".into())
                    }
                    // YAML 1.1's `value` key, which PyYAML resolves and cannot construct.
                    (None, TScalarStyle::Plain) if text == "=" && !is_key => Err(
                        "'=' alone is YAML 1.1's value key, which PyYAML cannot read; quote it"
                            .into(),
                    ),
                    // PyYAML takes no empty key but after `?`; dlio-rs takes none.
                    (None, TScalarStyle::Plain) if is_key && text.is_empty() => {
                        Err("an empty key".into())
                    }
                    (None, TScalarStyle::Plain) => resolve_plain(&text),
                    (None, _) => Ok(Value::Str(text)),
                };
                match value {
                    Ok(value) => self.push_value(value, anchor, mark),
                    Err(message) => self.fail(mark, message),
                }
            }
            Event::SequenceStart(anchor, tag) => {
                self.open(Frame::List(Vec::new()), anchor, tag, mark);
            }
            Event::MappingStart(anchor, tag) => {
                let frame = Frame::Map {
                    entries: Vec::new(),
                    pending_key: None,
                    merged: Vec::new(),
                    merging: false,
                };
                self.open(frame, anchor, tag, mark);
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let value = match self.stack.pop() {
                    Some(Frame::List(items)) => Value::List(items),
                    Some(Frame::Map {
                        entries, merged, ..
                    }) => Value::Map(Self::with_merged(entries, merged)),
                    None => return,
                };
                let anchor = self.pending_anchor.pop().unwrap_or(0);
                if self.count(1, mark) {
                    self.push_value(value, anchor, mark);
                }
            }
            Event::Alias(id) => match self.anchors.get(&id) {
                Some(value) => {
                    let value = value.clone();
                    if self.count(size(&value), mark) {
                        self.push_value(value, 0, mark);
                    }
                }
                None => self.fail(mark, "an alias (*name) of no anchor (&name)".into()),
            },
            _ => {}
        }
    }
}

/// A finite float as YAML 1.1 reads back as the same float: with a dot, and an exponent with its
/// sign where the digits would be many (`1.0`, `0.001`, `7.42e+165`); a whole number written out
/// in full would read as an integer.
fn float_yaml(f: f64) -> String {
    let plain = f.to_string();
    if plain.contains('.') {
        return plain;
    }
    if f.abs() < 1e16 {
        return format!("{f:.1}");
    }
    let scientific = format!("{f:e}");
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let mantissa = if mantissa.contains('.') {
        mantissa.to_string()
    } else {
        format!("{mantissa}.0")
    };
    match exponent.strip_prefix('-') {
        Some(negative) => format!("{mantissa}e-{negative}"),
        None => format!("{mantissa}e+{exponent}"),
    }
}

/// Whether a string must be quoted to read back as itself, in a block or a flow collection. The
/// rules keep plain what PyYAML's emitter keeps plain in the files Hydra writes (`- ++a.b=c`).
fn needs_quotes(s: &str) -> bool {
    s.is_empty()
        || s == "="
        || s == "<<"
        || !matches!(resolve_plain(s), Ok(Value::Str(_)))
        || s.starts_with(|c: char| " -?:,[]{}#&*!|>'\"%@`~".contains(c))
        || s.ends_with([' ', ':'])
        // In a flow collection yaml-rust2 refuses a plain scalar whose last word is `-` (the `-`
        // is then followed by `,`, `]` or `}`), which PyYAML reads.
        || s.ends_with(" -")
        || s.contains(": ")
        || s.contains(" #")
        || s.contains([',', '[', ']', '{', '}'])
        || s.chars().any(needs_escape)
}

/// Characters a YAML string can hold only escaped, in double quotes.
fn needs_escape(c: char) -> bool {
    c.is_control() || matches!(c, '\u{feff}' | '\u{2028}' | '\u{2029}')
}

/// A double-quoted YAML string: every character but the printable ones escaped.
fn double_quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if needs_escape(c) => {
                let _ = write!(out, "\\U{:08x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn scalar_yaml(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Bool(true) => "true".into(),
        Value::Bool(false) => "false".into(),
        Value::Int(i) => i.to_string(),
        Value::Float(f) if f.is_nan() => ".nan".into(),
        Value::Float(f) if f.is_infinite() => if *f > 0.0 { ".inf" } else { "-.inf" }.into(),
        Value::Float(f) => float_yaml(*f),
        // As PyYAML writes them: single quotes, unless a character needs an escape.
        Value::Str(s) if s.chars().any(needs_escape) => double_quoted(s),
        Value::Str(s) if needs_quotes(s) => format!("'{}'", s.replace('\'', "''")),
        Value::Str(s) => s.clone(),
        Value::List(items) => {
            let inner: Vec<String> = items.iter().map(scalar_yaml).collect();
            format!("[{}]", inner.join(", "))
        }
        Value::Map(entries) => {
            let inner: Vec<String> = entries
                .iter()
                .map(|(k, v)| {
                    format!(
                        "{}: {}",
                        scalar_yaml(&Value::Str(k.clone())),
                        scalar_yaml(v)
                    )
                })
                .collect();
            format!("{{{}}}", inner.join(", "))
        }
    }
}

fn is_nonempty_collection(value: &Value) -> bool {
    matches!(value, Value::List(l) if !l.is_empty())
        || matches!(value, Value::Map(m) if !m.is_empty())
}

fn write_block(out: &mut String, value: &Value, indent: usize) {
    let pad = " ".repeat(indent);
    match value {
        Value::Map(entries) => {
            for (key, child) in entries {
                let key = scalar_yaml(&Value::Str(key.clone()));
                if is_nonempty_collection(child) {
                    let _ = writeln!(out, "{pad}{key}:");
                    let child_indent = if matches!(child, Value::List(_)) {
                        indent
                    } else {
                        indent + 2
                    };
                    write_block(out, child, child_indent);
                } else {
                    let _ = writeln!(out, "{pad}{key}: {}", scalar_yaml(child));
                }
            }
        }
        Value::List(items) => {
            // Collections nested in lists are rare in configs; flow style keeps them exact.
            for item in items {
                let _ = writeln!(out, "{pad}- {}", scalar_yaml(item));
            }
        }
        scalar => {
            let _ = writeln!(out, "{pad}{}", scalar_yaml(scalar));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_1_1_booleans_and_quoted_strings() {
        let v = Value::from_yaml("a: off\nb: 'off'\nc: Yes\nd: 1e-3\ne: 12\nf: 0.5\ng: ~\nh: abc")
            .unwrap();
        assert_eq!(v.get("a"), Some(&Value::Bool(false)));
        assert_eq!(v.get("b"), Some(&Value::Str("off".into())));
        assert_eq!(v.get("c"), Some(&Value::Bool(true)));
        assert_eq!(v.get("d"), Some(&Value::Float(1e-3)));
        assert_eq!(v.get("e"), Some(&Value::Int(12)));
        assert_eq!(v.get("f"), Some(&Value::Float(0.5)));
        assert_eq!(v.get("g"), Some(&Value::Null));
        assert_eq!(v.get("h"), Some(&Value::Str("abc".into())));
    }

    #[test]
    fn emitted_yaml_reads_back_identically() {
        let text = "dataset:\n  data_folder: data/unet3d\n  record_dims: [1, 2]\n  flag: 'off'\n  empty: ''\n\
                    train:\n  computation_time: {mean: 0.5, stdev: 0.1}\n  epochs: 5\nlist:\n- a\n- 'yes'\n";
        let v = Value::from_yaml(text).unwrap();
        let again = Value::from_yaml(&v.to_yaml()).unwrap();
        assert_eq!(v, again);
    }

    /// A string whose last word is `-` inside a flow collection (found by the grammar fuzz test:
    /// written plain, yaml-rust2 refused `{_: $ -}`).
    #[test]
    fn a_string_ending_in_a_lone_dash_reads_back_from_a_flow_collection() {
        let item = Value::Map(vec![("_".into(), Value::Str("$ -".into()))]);
        let v = Value::Map(vec![("root".into(), Value::List(vec![item]))]);
        assert_eq!(Value::from_yaml(&v.to_yaml()), Ok(v));
    }

    #[test]
    fn json_round_trips_every_kind() {
        let tree = Value::Map(vec![
            ("null".into(), Value::Null),
            ("yes".into(), Value::Bool(true)),
            ("no".into(), Value::Bool(false)),
            ("int".into(), Value::Int(-42)),
            ("big".into(), Value::Int(i64::MAX)),
            ("whole_float".into(), Value::Float(3.0)),
            ("float".into(), Value::Float(1e-3)),
            ("string".into(), Value::Str("off".into())),
            ("numeric_string".into(), Value::Str("12".into())),
            ("empty_list".into(), Value::List(Vec::new())),
            ("empty_map".into(), Value::empty_map()),
            (
                "nested".into(),
                Value::List(vec![
                    Value::Int(1),
                    Value::Map(vec![
                        ("z".into(), Value::Float(0.5)),
                        ("a".into(), Value::Null),
                    ]),
                ]),
            ),
        ]);
        assert_eq!(Value::from_json(&tree.to_json()), tree);
        let text = serde_json::to_string(&tree.to_json()).unwrap();
        let parsed: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(Value::from_json(&parsed), tree, "through JSON text: {text}");
    }

    #[test]
    fn set_and_remove_paths() {
        let mut v = Value::from_yaml("a:\n  b: 1\n").unwrap();
        v.set_path(&["a", "c", "d"], Value::Int(2)).unwrap();
        assert_eq!(v.get_path(&["a", "c", "d"]), Some(&Value::Int(2)));
        // A scalar on the way becomes a mapping (Hydra's `++a.b.x=3` over `b: 1`); a list fails.
        v.set_path(&["a", "b", "x"], Value::Int(3)).unwrap();
        assert_eq!(v.get_path(&["a", "b", "x"]), Some(&Value::Int(3)));
        v.set_path(&["a", "l"], Value::List(vec![Value::Int(1)]))
            .unwrap();
        assert_eq!(
            v.set_path(&["a", "l", "x"], Value::Int(3)),
            Err("a.l".into())
        );
        assert!(v.remove_path(&["a", "b"]));
        assert!(!v.remove_path(&["a", "b"]));
    }
}
