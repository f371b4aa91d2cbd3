//! An untyped configuration tree read the way DLIO reads YAML: as YAML 1.1 (PyYAML / OmegaConf),
//! where the plain scalars `off`, `on`, `yes`, `no` are booleans. Quoted scalars stay strings.
//!
//! The tree keeps mapping order, so the configuration we save (`config.yaml`) reads like the input.

use std::fmt::Write as _;

use yaml_rust2::parser::{Event, MarkedEventReceiver, Parser};
use yaml_rust2::scanner::{Marker, TScalarStyle};

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

    /// The value at a dotted path of mapping keys.
    pub fn get_path(&self, path: &[&str]) -> Option<&Value> {
        path.iter().try_fold(self, |node, key| node.get(key))
    }

    /// Sets the value at `path`, creating intermediate mappings. Fails (returning the prefix that is
    /// not a mapping) when a node on the way is a scalar or list.
    pub fn set_path(&mut self, path: &[&str], value: Value) -> Result<(), String> {
        let (last, parents) = path.split_last().expect("non-empty path");
        let mut node = self;
        for (depth, key) in parents.iter().enumerate() {
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

    /// Parses one YAML document (an empty document is an empty mapping).
    pub fn from_yaml(text: &str) -> Result<Value, String> {
        let mut builder = TreeBuilder::default();
        Parser::new_from_str(text)
            .load(&mut builder, false)
            .map_err(|e| e.to_string())?;
        if let Some(message) = builder.error {
            return Err(message);
        }
        Ok(builder.root.unwrap_or_else(Value::empty_map))
    }

    /// Parses a single value as written on a command line (`8`, `True`, `[1,2]`, `{mean: 1}`).
    pub fn from_yaml_scalar_text(text: &str) -> Result<Value, String> {
        if text.trim().is_empty() {
            return Ok(Value::Null);
        }
        Value::from_yaml(text)
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

/// Resolves a plain (unquoted) scalar with the YAML 1.1 rules PyYAML applies, plus the exponent
/// floats without a dot (`1e-3`) that OmegaConf accepts.
fn resolve_plain(text: &str) -> Value {
    match text {
        "" | "~" | "null" | "Null" | "NULL" => return Value::Null,
        "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => {
            return Value::Bool(true)
        }
        "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off" | "OFF" => {
            return Value::Bool(false)
        }
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => {
            return Value::Float(f64::INFINITY)
        }
        "-.inf" | "-.Inf" | "-.INF" => return Value::Float(f64::NEG_INFINITY),
        ".nan" | ".NaN" | ".NAN" => return Value::Float(f64::NAN),
        _ => {}
    }
    let digits: String = text.chars().filter(|&c| c != '_').collect();
    if let Some(hex) = digits.strip_prefix("0x") {
        if let Ok(i) = i64::from_str_radix(hex, 16) {
            return Value::Int(i);
        }
    }
    let looks_numeric = digits
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_digit() || matches!(c, '-' | '+' | '.'))
        && digits
            .chars()
            .all(|c| c.is_ascii_digit() || matches!(c, '-' | '+' | '.' | 'e' | 'E'));
    if looks_numeric {
        if let Ok(i) = digits.parse::<i64>() {
            return Value::Int(i);
        }
        if digits.chars().any(|c| c.is_ascii_digit()) {
            if let Ok(f) = digits.parse::<f64>() {
                return Value::Float(f);
            }
        }
    }
    Value::Str(text.to_string())
}

enum Frame {
    List(Vec<Value>),
    Map(Vec<(String, Value)>, Option<String>),
}

#[derive(Default)]
struct TreeBuilder {
    stack: Vec<Frame>,
    root: Option<Value>,
    anchors: Vec<(usize, Value)>,
    pending_anchor: Vec<usize>,
    error: Option<String>,
}

impl TreeBuilder {
    fn push_value(&mut self, value: Value, anchor: usize) {
        if anchor > 0 {
            self.anchors.push((anchor, value.clone()));
        }
        match self.stack.last_mut() {
            None => self.root = Some(value),
            Some(Frame::List(items)) => items.push(value),
            Some(Frame::Map(entries, pending_key)) => match pending_key.take() {
                None => match value {
                    Value::Str(key) => *pending_key = Some(key),
                    other => *pending_key = Some(scalar_yaml(&other)),
                },
                Some(key) => {
                    // A repeated key replaces the earlier value, as PyYAML does.
                    entries.retain(|(k, _)| *k != key);
                    entries.push((key, value));
                }
            },
        }
    }
}

impl MarkedEventReceiver for TreeBuilder {
    fn on_event(&mut self, event: Event, mark: Marker) {
        match event {
            Event::Scalar(text, style, anchor, _tag) => {
                let value = match style {
                    TScalarStyle::Plain => resolve_plain(&text),
                    _ => Value::Str(text),
                };
                self.push_value(value, anchor);
            }
            Event::SequenceStart(anchor, _) => {
                self.pending_anchor.push(anchor);
                self.stack.push(Frame::List(Vec::new()));
            }
            Event::MappingStart(anchor, _) => {
                self.pending_anchor.push(anchor);
                self.stack.push(Frame::Map(Vec::new(), None));
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let value = match self.stack.pop() {
                    Some(Frame::List(items)) => Value::List(items),
                    Some(Frame::Map(entries, _)) => Value::Map(entries),
                    None => return,
                };
                let anchor = self.pending_anchor.pop().unwrap_or(0);
                self.push_value(value, anchor);
            }
            Event::Alias(id) => match self.anchors.iter().rev().find(|(a, _)| *a == id) {
                Some((_, value)) => {
                    let value = value.clone();
                    self.push_value(value, 0);
                }
                None => {
                    self.error = Some(format!("unknown alias at line {}", mark.line()));
                }
            },
            _ => {}
        }
    }
}

fn needs_quotes(s: &str) -> bool {
    s.is_empty()
        || !matches!(resolve_plain(s), Value::Str(_))
        || s.starts_with(|c: char| " -?:,[]{}#&*!|>'\"%@`~".contains(c))
        || s.ends_with(' ')
        || s.contains(": ")
        || s.contains(" #")
        || s.contains('\n')
}

fn scalar_yaml(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Bool(true) => "true".into(),
        Value::Bool(false) => "false".into(),
        Value::Int(i) => i.to_string(),
        Value::Float(f) if f.is_nan() => ".nan".into(),
        Value::Float(f) if f.is_infinite() => if *f > 0.0 { ".inf" } else { "-.inf" }.into(),
        Value::Float(f) if f.fract() == 0.0 && f.abs() < 1e16 => format!("{f:.1}"),
        Value::Float(f) => f.to_string(),
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
        assert_eq!(
            v.set_path(&["a", "b", "x"], Value::Int(3)),
            Err("a.b".into())
        );
        assert!(v.remove_path(&["a", "b"]));
        assert!(!v.remove_path(&["a", "b"]));
    }
}
