//! dlio-rs reads configuration text as DLIO's own stack does: workload files as OmegaConf's YAML
//! loader (PyYAML's SafeLoader with OmegaConf's changes), and the values of override words with
//! Hydra's override grammar. Every text below, chosen and generated at random, is read by those
//! real readers (.ci/run installs omegaconf and hydra-core) and by dlio-rs, and the two must make
//! the same tree, or both refuse it. The differences allowed are refusals with the reason: an
//! integer beyond 64 bits (Python keeps it whole), `!!binary` (bytes), and for words the sweeps
//! and functions that a single run cannot take.

use std::io::Write;
use std::process::{Command, Stdio};

use dlio_rs::config::value::Value;
use serde_json::{json, Value as Json};

/// YAML 1.1's details that YAML 1.2 readers get wrong, and what OmegaConf changes.
const TEXTS: &[&str] = &[
    // Integers: octal with a leading 0, binary, hex, base 60, underscores, signs.
    "a: 017",
    "a: 0o17",
    "a: 09",
    "a: 0x1F",
    "a: -0x1F",
    "a: 0b101",
    "a: 0b1_0",
    "a: 1_000",
    "a: 1__0",
    "a: _1",
    "a: 1:30",
    "a: 190:20:30",
    "a: 0:30",
    "a: 1:60",
    "a: +1",
    "a: -0",
    "a: 0",
    "a: 00",
    "a: 9223372036854775807",
    "a: -9223372036854775808",
    // Floats: PyYAML's, and the exponents without a dot OmegaConf adds.
    "a: 1e3",
    "a: 1E3",
    "a: 1e+3",
    "a: 1.5e3",
    "a: 1.5e-3",
    "a: 6.8523015e+5",
    "a: .5",
    "a: +.5",
    "a: 0.",
    "a: 1.0_0",
    "a: 190:20:30.15",
    "a: 12e",
    "a: .inf",
    "a: -.Inf",
    "a: +.INF",
    "a: .NaN",
    "a: inf",
    "a: nan",
    "a: 1e400",
    // Booleans and nulls of YAML 1.1.
    "a: yes",
    "a: No",
    "a: ON",
    "a: off",
    "a: y",
    "a: n",
    "a: True",
    "a: tRUE",
    "a: ~",
    "a: null",
    "a: NULL",
    "a:",
    // Strings: quoted, dates (OmegaConf drops timestamps), block scalars, odd plain ones.
    "a: '017'",
    "a: \"yes\"",
    "a: 2024-01-01",
    "a: 2024-01-01 10:00:00",
    "a: |\n  two\n  lines\n",
    "a: >\n  folded\n  text\n",
    "a: data/unet3d",
    "a: hello world # a comment",
    "a: é€",
    "a: '<<'",
    // Tags.
    "a: !!str 5",
    "a: !!int '5'",
    "a: !!float 1",
    "a: !!bool yes",
    "a: !!null ''",
    "a: !!python/name:os.system x",
    "a: !custom 5",
    "a: !!binary aGVsbG8=",
    // Anchors, aliases and merge keys.
    "base: &b {x: 1, y: 2}\nc: *b",
    "base: &b {x: 1, y: 2}\nc:\n  <<: *b\n  y: 3",
    "one: &1 {x: 1}\ntwo: &2 {x: 2, z: 2}\nc:\n  <<: [*1, *2]\n  w: 0",
    "c:\n  <<: {x: 1}\n  x: 2",
    "c:\n  <<: 5",
    "a: *nowhere",
    "l: &l [1, 2]\nm: [*l, *l]",
    // Structure: documents, byte-order mark, duplicates, keys, errors of syntax.
    "\u{feff}a: 1",
    "---\na: 1",
    "a: 1\n...\n",
    "a: 1\n---\nb: 2",
    "a: 1\n---\n",
    "",
    "# only a comment\n",
    "a: 1\na: 2",
    "a:\n  b: 1\n  b: 2",
    "a: {x: 1, x: 2}",
    "1: x",
    "true: x",
    "? [a, b]\n: x",
    "a:\n\t- 1",
    "a: [1, 2",
    "a: {b: 1",
    "a: b: c",
    "- 1\n- 2",
    "a: [[1, [2, [3]]], {b: [4]}]",
    "dataset:\n  num_files_train: 017\n  record_length_bytes: 1_048_576\n  data_folder: data/x",
];

/// Each text as the Python reader `script` (in tests/python) makes it.
fn python_reads<S: AsRef<str> + serde::Serialize>(script: &str, texts: &[S]) -> Vec<Json> {
    let script = format!("{}/tests/python/{script}", env!("CARGO_MANIFEST_DIR"));
    let mut child = Command::new("python3")
        .arg(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 (installed by .ci/run)");
    let input = serde_json::to_vec(texts).unwrap();
    child.stdin.take().unwrap().write_all(&input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{script} did not run (.ci/run installs omegaconf and hydra-core): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let results: Vec<Json> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(results.len(), texts.len());
    results
}

/// A dlio-rs tree in the script's form.
fn tree(value: &Value) -> Json {
    match value {
        Value::Null => json!({"null": null}),
        Value::Bool(b) => json!({ "bool": b }),
        Value::Int(i) => json!({"int": i.to_string()}),
        Value::Float(f) => json!({ "float": f.to_string() }),
        Value::Str(s) => json!({ "str": s }),
        Value::List(items) => json!({"list": items.iter().map(tree).collect::<Vec<_>>()}),
        Value::Map(entries) => json!({
            "map": entries.iter().map(|(k, v)| json!([k, tree(v)])).collect::<Vec<_>>()
        }),
    }
}

/// Whether two trees in the script's form are the same; floats by value (Python's `repr` and
/// Rust's digits differ), NaN equal to NaN.
fn same(ours: &Json, theirs: &Json) -> bool {
    match (ours, theirs) {
        (Json::Object(a), Json::Object(b)) if a.contains_key("float") => {
            let mine: f64 = a["float"].as_str().unwrap().parse().unwrap_or(f64::NAN);
            let python = match b.get("float").and_then(Json::as_str) {
                Some("inf") => f64::INFINITY,
                Some("-inf") => f64::NEG_INFINITY,
                Some(text) => text.parse().unwrap_or(f64::NAN),
                None => return false,
            };
            mine == python || (mine.is_nan() && python.is_nan())
        }
        (Json::Object(a), Json::Object(b)) => {
            a.len() == b.len() && a.iter().all(|(k, v)| b.get(k).is_some_and(|w| same(v, w)))
        }
        (Json::Array(a), Json::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(v, w)| same(v, w))
        }
        _ => ours == theirs,
    }
}

/// Whether dlio-rs's reading `ours` of a text agrees with the Python reader's `theirs`.
fn agrees(ours: &Result<Value, String>, theirs: &Json) -> bool {
    match (ours, theirs.get("value"), theirs.get("error")) {
        (Ok(value), Some(expected), None) => same(&tree(value), expected),
        (Err(message), None, Some(_)) => !message.is_empty(),
        // What the Python readers make and dlio-rs refuses, saying why.
        (Err(message), Some(value), None) => {
            message.contains("too large an integer")
                || message.contains("function")
                // What a YAML 1.2 reader would read otherwise than PyYAML: refused.
                || message.contains("anchor or alias name")
                || message.contains("an empty key")
                || message.contains("comments must be separated")
                || value.to_string().contains("\"other\"")
                    && (message.contains("not supported") || message.contains("sweep"))
        }
        // Hydra's functions (`x(1)`) are refused whatever Hydra makes of them.
        (Err(message), _, _) => message.contains("function"),
        _ => false,
    }
}

/// Reads `texts` with `read` and with the Python reader `script`, and lists the disagreements.
fn compare<S: AsRef<str> + serde::Serialize + std::fmt::Debug>(
    script: &str,
    texts: &[S],
    read: impl Fn(&str) -> Result<Value, String>,
) {
    let theirs = python_reads(script, texts);
    let differences: Vec<String> = texts
        .iter()
        .zip(&theirs)
        .filter_map(|(text, theirs)| {
            let ours = read(text.as_ref());
            (!agrees(&ours, theirs)).then(|| {
                format!(
                    "{text:?}:\n  dlio-rs: {:?}\n  Python:  {theirs}",
                    ours.map(|v| tree(&v))
                )
            })
        })
        .collect();
    assert!(
        differences.is_empty(),
        "{} of {} texts read differently:\n{}",
        differences.len(),
        texts.len(),
        differences
            .iter()
            .take(40)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn yaml_is_read_as_omegaconf_reads_it() {
    compare("omegaconf_yaml.py", TEXTS, Value::from_yaml);
}

/// Pieces of plain scalars and flow collections, put together at random: the cases no list
/// thinks of.
const PIECES: &[&str] = &[
    "0", "1", "7", "9", "_", ".", "e", "E", "-", "+", ":", "x", "b", "0x", "0b", "inf", "nan",
    "Inf", "NaN", "true", "False", "yes", "on", "null", "None", "~", "#", " ", "\t", ",", "[", "]",
    "{", "}", "(", ")", "'", "\"", "\\", "$", "${x}", "=", "/", "%", "@", "?", "|", "*", "!", "&",
    "é", "<<", "\\,", "\\ ",
];

/// `count` strings of 1 to 6 pieces, the same every run.
fn soup(count: usize, seed: u64) -> Vec<String> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    (0..count)
        .map(|_| {
            let pieces = rng.random_range(1..=6);
            (0..pieces)
                .map(|_| PIECES[rng.random_range(0..PIECES.len())])
                .collect()
        })
        .collect()
}

#[test]
fn every_shipped_workload_is_read_as_omegaconf_reads_it() {
    let texts: Vec<&str> = dlio_rs::config::workloads::SHIPPED
        .iter()
        .map(|(_, text)| *text)
        .collect();
    assert!(texts.len() >= 28);
    compare("omegaconf_yaml.py", &texts, Value::from_yaml);
}

#[test]
fn random_yaml_scalars_and_collections_are_read_as_omegaconf_reads_them() {
    let texts: Vec<String> = soup(1500, 1)
        .into_iter()
        .enumerate()
        .map(|(i, s)| match i % 3 {
            0 => format!("a: {s}"),
            1 => format!("{s}: 1"),
            _ => format!("a:\n  - {s}\n  - b"),
        })
        .collect();
    compare("omegaconf_yaml.py", &texts, Value::from_yaml);
}

/// Values of override words: Hydra's grammar, which is not YAML's.
const WORD_VALUES: &[&str] = &[
    "017",
    "0o17",
    "09",
    "0x1F",
    "1_000",
    "1__0",
    "1_",
    "_1",
    "1:30",
    "1e3",
    "1E3",
    "1e3_0",
    ".5",
    ".5e3",
    "+.5",
    "1.",
    "-0",
    "+1",
    "-1e-3",
    "1_0.5",
    "0.5_5",
    "1e",
    "e3",
    "inf",
    "-inf",
    "InF",
    "nan",
    "-nan",
    ".inf",
    "1e400",
    "99999999999999999999",
    "9223372036854775807",
    "yes",
    "on",
    "True",
    "true",
    "TRUE",
    "false",
    "null",
    "NuLL",
    "~",
    "",
    "   ",
    "  spaced  ",
    "abc def",
    "a:b",
    "a : b",
    "a/b:c",
    "data/unet3d",
    "a-b",
    "a.b",
    "-",
    "+",
    "$x",
    "%d",
    "@x",
    "a?b",
    "a|b",
    "a*b",
    "a\tb",
    "é",
    "a#b",
    "a=b",
    "a&b",
    "a!b",
    "<x>",
    "a;b",
    "a\"b",
    "a'b",
    "'a'b",
    "'it''s'",
    "'a\\'b'",
    "\"a\\\"b\"",
    "'017'",
    "\"yes\"",
    "''",
    "'a\\\\'",
    "'x\\\\\\'y'",
    "a\\,b",
    "a\\ b",
    "a\\\\b",
    "${oc.env:HOME}",
    "a${x}b",
    "${}",
    "[1,2]",
    "[]",
    "{}",
    "[ 1 , 2 ]",
    "[a b, c]",
    "[1,[2,[3]]]",
    "[,]",
    "[1,]",
    "[1",
    "1]",
    "{a: 1}",
    "{a: 1, a: 2}",
    "{a b: 1}",
    "{1: 2}",
    "{true: 1}",
    "{null: 1}",
    "{1.5: x}",
    "{a: [1, {b: 2}]}",
    "{a:}",
    "{a: }",
    "{a}",
    "{mean: 0.5, stdev: 0.1}",
    "{type: normal, mean: 1e-3}",
    "a,b",
    "[1,2],3",
    "int(3)",
    "str(1)",
    "x(1)",
    "range(1,3)",
    "'a'  ",
];

#[test]
fn override_values_are_read_as_hydra_reads_them() {
    compare(
        "hydra_value.py",
        WORD_VALUES,
        dlio_rs::config::word_value::parse,
    );
}

#[test]
fn random_override_values_are_read_as_hydra_reads_them() {
    compare(
        "hydra_value.py",
        &soup(3000, 2),
        dlio_rs::config::word_value::parse,
    );
}

#[test]
fn a_deeply_nested_word_value_is_refused_not_a_stack_overflow() {
    let deep = format!("{}1{}", "[".repeat(100_000), "]".repeat(100_000));
    let refused = dlio_rs::config::word_value::parse(&deep).unwrap_err();
    assert!(refused.contains("nested deeper than 64"), "{refused}");
    let fine = format!("{}1{}", "[".repeat(64), "]".repeat(64));
    assert!(dlio_rs::config::word_value::parse(&fine).is_ok());
}

#[test]
fn hostile_yaml_is_refused_quickly_with_the_reason() {
    let bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n\
                b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n\
                c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n\
                d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n\
                e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\n\
                f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n\
                g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f, *f]\n\
                h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g, *g]\n";
    let deep_flow = format!("a: {}1{}", "[".repeat(100_000), "]".repeat(100_000));
    let deep_block: String = (0..200)
        .map(|depth| format!("{}k{depth}:\n", "  ".repeat(depth)))
        .collect();
    // The parser has its own limit for flow collections, met first.
    for (name, text, reason) in [
        ("alias bomb", bomb.to_string(), "alias bomb"),
        ("deep flow", deep_flow, "recursion limit exceeded"),
        ("deep block", deep_block, "nested deeper than"),
    ] {
        let started = std::time::Instant::now();
        let outcome = Value::from_yaml(&text);
        assert!(
            started.elapsed() < std::time::Duration::from_secs(5),
            "{name} took {:?}",
            started.elapsed()
        );
        match outcome {
            Err(message) => assert!(message.contains(reason), "{name}: {message}"),
            Ok(_) => panic!("{name} was accepted"),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Fuzzing: whatever the text, a result or a refusal, never a panic or a hang.
// ---------------------------------------------------------------------------------------------

mod fuzz {
    use dlio_rs::config::overrides::Overrides;
    use dlio_rs::config::value::Value;
    use proptest::prelude::*;

    /// Characters that mean something to YAML or to Hydra, and some that mean nothing.
    fn text() -> impl Strategy<Value = String> {
        let special = prop::sample::select(
            " \t\n\r:-?,[]{}#&*!|>'\"%@`~=+.$()\\/_0123456789eEaxbnlINF<é\u{feff}\u{0}"
                .chars()
                .collect::<Vec<_>>(),
        );
        let any = any::<char>();
        prop::collection::vec(prop_oneof![4 => special, 1 => any], 0..48)
            .prop_map(|chars| chars.into_iter().collect())
    }

    /// A configuration tree of scalars, lists and mappings, a few levels deep.
    fn tree() -> impl Strategy<Value = Value> {
        let scalar = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::Int),
            any::<f64>()
                .prop_filter("NaN is not equal to itself", |f| !f.is_nan())
                .prop_map(Value::Float),
            text().prop_map(Value::Str),
        ];
        scalar.prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::List),
                prop::collection::vec(("[a-z_]{1,6}", inner), 0..4).prop_map(|entries| {
                    let mut unique: Vec<(String, Value)> = Vec::new();
                    for (key, value) in entries {
                        if !unique.iter().any(|(k, _)| *k == key) {
                            unique.push((key, value));
                        }
                    }
                    Value::Map(unique)
                }),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

        #[test]
        fn any_text_is_read_or_refused(text in text()) {
            let _ = Value::from_yaml(&text);
            let _ = dlio_rs::config::word_value::parse(&text);
            let word = format!("++workload.dataset.format={text}");
            let _ = Overrides::parse(&[word.as_str()]);
            let _ = Overrides::parse(&[text.as_str()]);
        }

        #[test]
        fn a_tree_written_as_yaml_reads_back_the_same(tree in tree()) {
            let document = Value::Map(vec![("root".into(), tree)]);
            let text = document.to_yaml();
            prop_assert_eq!(Value::from_yaml(&text), Ok(document), "{}", text);
        }
    }
}
