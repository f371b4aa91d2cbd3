//! Results for machines (`--output-format json|csv`): a command's result as one document on
//! standard output, its text for people moved to standard error. Each JSON document is an
//! object that starts with `"command"` (the subcommand) and `"schema"` ([`SCHEMA`], raised
//! when a field changes meaning or goes away; fields are only ever added within one), laid out
//! in docs/running.md. A CSV document is a header row and one row per record, quoted per
//! RFC 4180 by [`Csv`].
//!
//! The CSV writer is these few lines rather than the `csv` crate: the tables are small and
//! written once, and quoting is the only rule that needs care (a field with a comma, a quote, a
//! CR or an LF is enclosed in quotes and its quotes doubled; rows end in CRLF).

use std::fmt::Write as _;

use serde_json::Value;

use crate::console::print_out;
use crate::error::Result;

/// The version of the documents' shapes.
pub const SCHEMA: u64 = 1;

/// What a command writes on standard output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutputFormat {
    /// Text for people (the default).
    #[default]
    Text,
    /// One JSON document.
    Json,
    /// One CSV table.
    Csv,
}

impl OutputFormat {
    /// Where the command's text for people goes: standard error when standard output carries a
    /// document.
    pub fn human(self) -> Human {
        match self {
            OutputFormat::Text => Human::Stdout,
            OutputFormat::Json | OutputFormat::Csv => Human::Stderr,
        }
    }
}

/// Where a command's text for people goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Human {
    #[default]
    Stdout,
    Stderr,
}

/// Writes text for people where `to` says: on standard output it fails as [`print_out`] does;
/// on standard error a line that cannot be written is lost, as [`crate::console::tell`]'s are.
pub fn show(text: &str, to: Human) -> Result<()> {
    match to {
        Human::Stdout => print_out(text),
        Human::Stderr => {
            use std::io::Write;
            let _ = std::io::stderr().lock().write_all(text.as_bytes());
            Ok(())
        }
    }
}

/// A JSON document's first two fields, `command` and `schema`, then `fields`.
pub fn document(command: &str, fields: Value) -> Value {
    let mut object = serde_json::Map::new();
    object.insert("command".into(), Value::from(command));
    object.insert("schema".into(), Value::from(SCHEMA));
    if let Value::Object(fields) = fields {
        object.extend(fields);
    }
    Value::Object(object)
}

/// Prints `value` on standard output, indented, with a final newline.
pub fn print_json(value: &Value) -> Result<()> {
    print_out(&format!("{value:#}\n"))
}

/// A CSV table being written: the header, then rows of as many fields.
pub struct Csv {
    text: String,
    columns: usize,
}

impl Csv {
    pub fn new(header: &[&str]) -> Csv {
        let mut csv = Csv {
            text: String::new(),
            columns: header.len(),
        };
        csv.push(header.iter().map(|h| h.to_string()));
        csv
    }

    /// One row; it must have as many fields as the header.
    pub fn row(&mut self, fields: impl IntoIterator<Item = String>) {
        let before = self.text.len();
        let count = self.push(fields);
        debug_assert_eq!(count, self.columns, "row {:?}", &self.text[before..]);
    }

    fn push(&mut self, fields: impl IntoIterator<Item = String>) -> usize {
        let mut count = 0;
        for field in fields {
            if count > 0 {
                self.text.push(',');
            }
            if field.contains([',', '"', '\r', '\n']) {
                let _ = write!(self.text, "\"{}\"", field.replace('"', "\"\""));
            } else {
                self.text.push_str(&field);
            }
            count += 1;
        }
        self.text.push_str("\r\n");
        count
    }

    pub fn finish(self) -> String {
        self.text
    }
}

/// A JSON value as a CSV field: a string as it is, a number as JSON writes it (the shortest
/// text that reads back as the same value), `null` or a missing value as an empty field,
/// `true`/`false`, and a list or object as its compact JSON.
pub fn field(value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_quoted_as_rfc_4180_says() {
        let mut csv = Csv::new(&["name", "description"]);
        csv.row(["plain".into(), "a, b".into()]);
        csv.row(["say \"hi\"".into(), "two\nlines".into()]);
        csv.row([String::new(), "cr\r".into()]);
        assert_eq!(
            csv.finish(),
            "name,description\r\nplain,\"a, b\"\r\n\"say \"\"hi\"\"\",\"two\nlines\"\r\n,\"cr\r\"\r\n"
        );
    }

    #[test]
    fn json_values_become_fields() {
        let values = serde_json::json!([null, "x,y", 0.1, 3, true, [1, 2]]);
        let fields: Vec<String> = values.as_array().unwrap().iter().map(field).collect();
        assert_eq!(fields, ["", "x,y", "0.1", "3", "true", "[1,2]"]);
    }

    #[test]
    fn a_document_starts_with_its_command_and_schema() {
        let doc = document("workloads", serde_json::json!({"workloads": []}));
        assert_eq!(
            doc.to_string(),
            r#"{"command":"workloads","schema":1,"workloads":[]}"#
        );
    }
}
