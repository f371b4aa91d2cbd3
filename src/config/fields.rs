//! Typed reads from a workload tree. Every read records its key as known, so that whatever is left
//! over afterwards is an unknown key; every failed read names the key, the value and what is valid.

use super::value::Value;

/// A configuration enumeration spelled as in DLIO's YAML files.
pub trait Choice: Sized + Copy + 'static {
    const NAMES: &'static [(&'static str, Self)];

    fn parse(text: &str) -> Option<Self> {
        Self::NAMES
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(text))
            .map(|(_, v)| *v)
    }

    fn valid_names() -> String {
        Self::NAMES
            .iter()
            .map(|(n, _)| *n)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Declares a [`Choice`] enum with its YAML names (the first name is the canonical one).
#[macro_export]
macro_rules! choice_enum {
    ($(#[$meta:meta])* $name:ident { $($variant:ident => $($text:literal)|+),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name { $($variant),+ }

        impl $crate::config::fields::Choice for $name {
            const NAMES: &'static [(&'static str, Self)] = &[$($(($text, $name::$variant)),+),+];
        }

        impl $name {
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => choice_enum!(@first $($text)|+)),+ }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
    (@first $first:literal $(| $rest:literal)*) => { $first };
}

pub struct Fields<'a> {
    root: &'a Value,
    known: Vec<String>,
    pub errors: Vec<String>,
}

fn show(value: &Value) -> String {
    match value {
        Value::Str(s) => format!("'{s}'"),
        other => other.to_flow_yaml(),
    }
}

impl<'a> Fields<'a> {
    pub fn new(root: &'a Value) -> Self {
        Fields {
            root,
            known: Vec::new(),
            errors: Vec::new(),
        }
    }

    /// The value at a dotted key, recorded as known (with its whole subtree).
    pub fn raw(&mut self, key: &str) -> Option<&'a Value> {
        self.known.push(key.to_string());
        let path: Vec<&str> = key.split('.').collect();
        match self.root.get_path(&path) {
            Some(Value::Null) | None => None,
            Some(v) => Some(v),
        }
    }

    pub fn fail(&mut self, key: &str, value: &Value, what: &str) {
        self.errors
            .push(format!("workload.{key} = {}: {what}", show(value)));
    }

    pub fn bool(&mut self, key: &str, default: bool) -> bool {
        match self.raw(key) {
            None => default,
            Some(Value::Bool(b)) => *b,
            Some(Value::Str(s)) if s.eq_ignore_ascii_case("true") => true,
            Some(Value::Str(s)) if s.eq_ignore_ascii_case("false") => false,
            Some(v) => {
                self.fail(
                    key,
                    v,
                    "expected a boolean: True or False (in a workload file also yes/no, on/off; \
                     in a word those are strings, as Hydra reads them)",
                );
                default
            }
        }
    }

    pub fn int(&mut self, key: &str, default: i64) -> i64 {
        match self.raw(key) {
            None => default,
            Some(Value::Int(i)) => *i,
            Some(Value::Float(f)) if f.fract() == 0.0 && f.abs() < 9e15 => *f as i64,
            Some(v @ Value::Float(f)) if f.is_finite() && f.fract() == 0.0 => {
                self.fail(
                    key,
                    v,
                    "too large: a whole number written as a float is taken up to 9e15",
                );
                default
            }
            Some(v) => {
                self.fail(key, v, "expected an integer");
                default
            }
        }
    }

    /// An integer that must be at least `min`.
    pub fn int_at_least(&mut self, key: &str, default: i64, min: i64) -> i64 {
        let value = self.int(key, default);
        if value < min {
            self.fail(key, &Value::Int(value), &format!("must be at least {min}"));
            return default.max(min);
        }
        value
    }

    pub fn count(&mut self, key: &str, default: u64, min: u64) -> u64 {
        self.int_at_least(key, default as i64, min as i64) as u64
    }

    /// A count of at least `min` and at most `max` ([`Fields::at_most`]).
    pub fn count_up_to(&mut self, key: &str, default: u64, min: u64, max: u64, what: &str) -> u64 {
        let n = self.count(key, default, min);
        self.at_most(key, n, max, what)
    }

    /// `value` of `key`, refused beyond `max`: `what` says what a larger value would be, so that
    /// a typo (`1e18` epochs) is an error, not days of a run or all the memory.
    pub fn at_most(&mut self, key: &str, value: u64, max: u64, what: &str) -> u64 {
        if value > max {
            self.fail(
                key,
                &Value::Int(i64::try_from(value).unwrap_or(i64::MAX)),
                &format!("must be at most {max} ({what})"),
            );
            return max;
        }
        value
    }

    /// A byte count; fractional values (upstream resnet50 has 114660.07) are floored, as DLIO's
    /// `int()` of the derived dimensions does.
    pub fn bytes(&mut self, key: &str, default: u64) -> u64 {
        match self.raw(key) {
            Some(Value::Float(f)) if f.is_finite() && *f >= 0.0 && *f < 9.2e18 => *f as u64,
            Some(v @ Value::Float(f)) if f.is_finite() && *f >= 0.0 => {
                self.fail(key, v, "too large a number of bytes");
                default
            }
            Some(v @ Value::Float(_)) => {
                self.fail(key, v, "expected a number of bytes, at least 0");
                default
            }
            Some(_) => self.count(key, default, 0),
            None => default,
        }
    }

    pub fn float(&mut self, key: &str, default: f64) -> f64 {
        match self.raw(key) {
            None => default,
            Some(Value::Int(i)) => *i as f64,
            Some(Value::Float(f)) if f.is_finite() => *f,
            Some(v) => {
                self.fail(key, v, "expected a finite number");
                default
            }
        }
    }

    pub fn string(&mut self, key: &str, default: &str) -> String {
        self.opt_string(key).unwrap_or_else(|| default.to_string())
    }

    /// A name that goes into a folder's path as one file-name component (`file_prefix`,
    /// `log_file`): not empty, no `/`, not `.` or `..`, so that nothing is written outside the
    /// folder.
    pub fn file_name(&mut self, key: &str, default: &str) -> String {
        let name = self.string(key, default);
        if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']) {
            self.fail(
                key,
                &Value::Str(name),
                "expected a file name (not empty, no '/', not '.' or '..'): it names files inside \
                 the folder",
            );
            return default.to_string();
        }
        name
    }

    pub fn opt_string(&mut self, key: &str) -> Option<String> {
        match self.raw(key) {
            None => None,
            Some(Value::Str(s)) => Some(s.clone()),
            Some(Value::Int(i)) => Some(i.to_string()),
            Some(Value::Float(f)) => Some(f.to_string()),
            Some(v) => {
                self.fail(key, v, "expected a string");
                None
            }
        }
    }

    pub fn choice<E: Choice>(&mut self, key: &str, default: E) -> E {
        let Some(value) = self.raw(key) else {
            return default;
        };
        let parsed = match value {
            Value::Str(s) => E::parse(s),
            // YAML 1.1 reads a plain `off` as false; DLIO's enums then see "False".
            Value::Bool(false) => E::parse("off").or_else(|| E::parse("none")),
            _ => None,
        };
        parsed.unwrap_or_else(|| {
            self.fail(
                key,
                value,
                &format!("valid values are {}", E::valid_names()),
            );
            default
        })
    }

    pub fn uint_list(&mut self, key: &str) -> Vec<u64> {
        match self.raw(key) {
            None => Vec::new(),
            Some(Value::List(items)) => {
                let mut out = Vec::with_capacity(items.len());
                for item in items {
                    match item {
                        Value::Int(i) if *i >= 1 => out.push(*i as u64),
                        _ => {
                            self.fail(
                                key,
                                &Value::List(items.clone()),
                                "expected a list of positive integers",
                            );
                            return Vec::new();
                        }
                    }
                }
                out
            }
            Some(Value::Int(i)) if *i >= 1 => vec![*i as u64],
            Some(v) => {
                self.fail(
                    key,
                    v,
                    "expected a list of positive integers, e.g. [128, 128]",
                );
                Vec::new()
            }
        }
    }

    /// Every key read so far, each once, in the order of their first reads.
    pub fn known_keys(self) -> Vec<String> {
        let mut keys: Vec<String> = Vec::new();
        for key in self.known {
            if !keys.contains(&key) {
                keys.push(key);
            }
        }
        keys
    }

    /// Ends the reads: the errors, and the keys of the tree that no read asked for (dotted paths).
    pub fn finish(mut self) -> (Vec<String>, Vec<String>) {
        let mut unknown = Vec::new();
        let mut prefix = String::new();
        collect_unknown(
            self.root,
            &mut prefix,
            &self.known,
            &mut unknown,
            &mut self.errors,
        );
        (self.errors, unknown)
    }
}

fn collect_unknown(
    node: &Value,
    prefix: &mut String,
    known: &[String],
    unknown: &mut Vec<String>,
    errors: &mut Vec<String>,
) {
    let Value::Map(entries) = node else { return };
    for (key, child) in entries {
        let len = prefix.len();
        if !prefix.is_empty() {
            prefix.push('.');
        }
        prefix.push_str(key);
        let is_known = known.iter().any(|k| k == prefix);
        let is_section = known.iter().any(|k| {
            k.starts_with(prefix.as_str()) && k.as_bytes().get(prefix.len()) == Some(&b'.')
        });
        match (is_known, is_section, child) {
            (true, _, _) | (false, true, Value::Null) => {}
            (false, true, Value::Map(_)) => collect_unknown(child, prefix, known, unknown, errors),
            (false, true, other) => errors.push(format!(
                "workload.{prefix} = {}: expected a section (a mapping of keys)",
                show(other)
            )),
            (false, false, _) => unknown.push(prefix.clone()),
        }
        prefix.truncate(len);
    }
}
