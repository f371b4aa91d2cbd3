//! The Hydra-style words of DLIO's command line: `workload=NAME`, `++workload.a.b=v` (set or add),
//! `workload.a.b=v` (override an existing key), `+workload.a.b=v` (add a new key), `~workload.a.b`
//! (delete), and the `hydra.run.dir` / `hydra.output_subdir` settings.

use super::value::Value;
use crate::error::Error;

/// The most segments an override's key may have (`workload.reader.batch_size` has 3).
const MAX_KEY_SEGMENTS: usize = 32;

/// How an edit treats a key that exists (or not) in the loaded workload, as Hydra does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EditKind {
    /// `++key=v`: set, whether or not the key exists.
    Upsert,
    /// `key=v`: the key must exist.
    Override,
    /// `+key=v`: the key must not exist.
    Append,
    /// `~key`: remove the key.
    Delete,
}

/// One edit of the workload tree, with the word it came from (for error messages).
#[derive(Debug, Clone, PartialEq)]
pub struct Edit {
    pub kind: EditKind,
    /// Path below `workload.`.
    pub path: Vec<String>,
    pub value: Value,
    /// Whether the word gave a value (`~a.b=5` deletes `a.b` only if it is 5, as in Hydra).
    pub value_given: bool,
    pub word: String,
}

/// Everything the Hydra-style words say.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Overrides {
    pub workload: Option<String>,
    pub edits: Vec<Edit>,
    pub hydra_run_dir: Option<String>,
    pub hydra_output_subdir: Option<String>,
    /// Words that Hydra would accept but that do not reach the benchmark (other `hydra.*` keys).
    pub ignored: Vec<String>,
    /// Every word, in order, as `overrides.yaml` records them.
    pub words: Vec<String>,
}

/// `text` as a quoted value of a Hydra word, which reads back as exactly `text`: in single quotes,
/// a quote escaped as `\'`, and a run of backslashes doubled where it comes before a quote or
/// the closing quote (Hydra's rule; elsewhere backslashes are themselves).
pub fn hydra_quoted(text: &str) -> String {
    let mut out = String::from("'");
    let mut backslashes = 0;
    for c in text.chars() {
        match c {
            '\\' => backslashes += 1,
            '\'' => {
                out.push_str(&"\\".repeat(backslashes * 2));
                out.push_str("\\'");
                backslashes = 0;
            }
            c => {
                out.push_str(&"\\".repeat(backslashes));
                out.push(c);
                backslashes = 0;
            }
        }
    }
    out.push_str(&"\\".repeat(backslashes * 2));
    out.push('\'');
    out
}

impl Overrides {
    /// Puts a run's folder at `dir` (Hydra's run folder and the workload's `output.folder`) as a
    /// sweep's trial does: set as values, never parsed out of a word, so that no character of a
    /// folder's name can change what the words mean; recorded (for `overrides.yaml`) as the
    /// quoted words Hydra would take.
    pub fn set_run_folder(&mut self, dir: &str) {
        let quoted = hydra_quoted(dir);
        self.hydra_run_dir = Some(dir.to_string());
        self.words.push(format!("++hydra.run.dir={quoted}"));
        let word = format!("++workload.output.folder={quoted}");
        self.edits.push(Edit {
            kind: EditKind::Upsert,
            path: vec!["output".into(), "folder".into()],
            value: Value::Str(dir.to_string()),
            value_given: true,
            word: word.clone(),
        });
        self.words.push(word);
    }

    pub fn parse<S: AsRef<str>>(words: &[S]) -> Result<Overrides, Error> {
        let mut out = Overrides::default();
        for word in words {
            out.add(word.as_ref())?;
        }
        Ok(out)
    }

    fn add(&mut self, word: &str) -> Result<(), Error> {
        let bad = |why: &str| {
            Error::usage(format!(
                "malformed override '{word}': {why}\n  valid forms: workload=NAME, ++workload.a.b=VALUE, \
                 workload.a.b=VALUE, +workload.a.b=VALUE, ~workload.a.b, ++hydra.run.dir=DIR"
            ))
        };
        let (kind, rest) = if let Some(r) = word.strip_prefix("++") {
            (EditKind::Upsert, r)
        } else if let Some(r) = word.strip_prefix('+') {
            (EditKind::Append, r)
        } else if let Some(r) = word.strip_prefix('~') {
            (EditKind::Delete, r)
        } else if word.starts_with('-') {
            return Err(bad(
                "options start with '--' and go before the override words",
            ));
        } else {
            (EditKind::Override, word)
        };
        let (key, value_text) = match rest.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None if kind == EditKind::Delete => (rest, None),
            None => return Err(bad("expected KEY=VALUE")),
        };
        if key.is_empty() {
            return Err(bad("the key is empty"));
        }
        let segments: Vec<&str> = key.split('.').collect();
        // With a value nested as deep as values may be (64), the run's own report.json must
        // still read back (JSON readers stop at 128 levels).
        if segments.len() > MAX_KEY_SEGMENTS {
            return Err(bad(&format!(
                "the key has {} segments; at most {MAX_KEY_SEGMENTS} are allowed",
                segments.len()
            )));
        }
        if let Some(empty) = segments.iter().position(|s| s.trim().is_empty()) {
            return Err(bad(&format!("key segment {} is empty", empty + 1)));
        }
        if let Some(seg) = segments.iter().find(|s| {
            !s.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '/'))
        }) {
            return Err(bad(&format!(
                "key segment '{seg}' has a character that is not allowed"
            )));
        }
        let value = match value_text {
            Some(text) => {
                super::word_value::parse(text).map_err(|e| bad(&format!("value '{text}': {e}")))?
            }
            None => Value::Null,
        };
        self.words.push(word.to_string());
        match segments.as_slice() {
            ["workload"] => {
                if kind == EditKind::Delete {
                    return Err(bad("the workload itself cannot be deleted"));
                }
                match value {
                    Value::Str(name) if !name.is_empty() => self.workload = Some(name),
                    _ => return Err(bad("workload=NAME needs a workload name")),
                }
            }
            ["workload", path @ ..] => self.edits.push(Edit {
                kind,
                path: path.iter().map(|s| s.to_string()).collect(),
                value,
                value_given: value_text.is_some(),
                word: word.to_string(),
            }),
            ["hydra", "run", "dir"] => {
                let dir = scalar_text(&value, word)?;
                if dir.is_empty() {
                    return Err(bad("the run folder needs a name"));
                }
                self.hydra_run_dir = Some(dir)
            }
            ["hydra", "output_subdir"] => {
                let subdir = scalar_text(&value, word)?;
                // A folder inside the run folder, never beside or above it.
                let inside = std::path::Path::new(&subdir).components().all(|c| {
                    matches!(
                        c,
                        std::path::Component::Normal(_) | std::path::Component::CurDir
                    )
                });
                if subdir.is_empty() || !inside {
                    return Err(bad(
                        "the subfolder for Hydra's files is a relative path inside the run folder \
                         (no '..', not absolute, not empty)",
                    ));
                }
                self.hydra_output_subdir = Some(subdir)
            }
            ["hydra", ..] => self.ignored.push(word.to_string()),
            _ => {
                return Err(bad(&format!(
                    "'{}' is not a configuration group; keys start with 'workload.' or 'hydra.'",
                    segments[0]
                )))
            }
        }
        Ok(())
    }

    /// Applies the edits to a workload tree with Hydra's rules for existing and missing keys.
    pub fn apply(&self, tree: &mut Value) -> Result<(), Error> {
        for edit in &self.edits {
            let path: Vec<&str> = edit.path.iter().map(String::as_str).collect();
            let dotted = format!("workload.{}", edit.path.join("."));
            let exists = tree.get_path(&path).is_some();
            match edit.kind {
                EditKind::Override if !exists => {
                    return Err(Error::usage(format!(
                        "could not override '{dotted}' (in '{}'): the key is not in the workload; \
                         to add it use '++{dotted}=...' or '+{dotted}=...'",
                        edit.word
                    )))
                }
                EditKind::Append if exists => {
                    return Err(Error::usage(format!(
                        "could not add '{dotted}' (in '{}'): the key is already in the workload; \
                         to change it use '++{dotted}=...'",
                        edit.word
                    )))
                }
                EditKind::Delete => {
                    let found = tree.get_path(&path);
                    if let (true, Some(found)) = (edit.value_given, found) {
                        if *found != edit.value {
                            return Err(Error::usage(format!(
                                "could not delete '{dotted}' (in '{}'): its value is {}, not {}",
                                edit.word,
                                found.to_flow_yaml(),
                                edit.value.to_flow_yaml()
                            )));
                        }
                    }
                    if !tree.remove_path(&path) {
                        return Err(Error::usage(format!(
                            "could not delete '{dotted}' (in '{}'): the key is not in the workload",
                            edit.word
                        )));
                    }
                    continue;
                }
                _ => {}
            }
            tree.set_path(&path, edit.value.clone()).map_err(|parent| {
                Error::usage(format!(
                    "could not set '{dotted}' (in '{}'): 'workload.{parent}' is a list, not a section",
                    edit.word
                ))
            })?;
        }
        Ok(())
    }
}

fn scalar_text(value: &Value, word: &str) -> Result<String, Error> {
    match value {
        Value::Str(s) => Ok(s.clone()),
        Value::Int(i) => Ok(i.to_string()),
        Value::Float(f) => Ok(f.to_string()),
        Value::Bool(b) => Ok(b.to_string()),
        _ => Err(Error::usage(format!(
            "malformed override '{word}': expected a path"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(words: &[&str]) -> Result<Overrides, Error> {
        Overrides::parse(words)
    }

    #[test]
    fn all_word_forms() {
        let o = parse(&[
            "workload=unet3d_h100",
            "++workload.reader.read_threads=8",
            "workload.train.epochs=2",
            "+workload.dataset.record_dims=[1,2]",
            "~workload.checkpoint",
            "++workload.train.computation_time={mean: 1, stdev: 0.1}",
            "++hydra.run.dir=results/run1",
            "++hydra.output_subdir=dlio_config",
            "hydra.job.chdir=False",
        ])
        .unwrap();
        assert_eq!(o.workload.as_deref(), Some("unet3d_h100"));
        assert_eq!(o.hydra_run_dir.as_deref(), Some("results/run1"));
        assert_eq!(o.hydra_output_subdir.as_deref(), Some("dlio_config"));
        assert_eq!(o.ignored, vec!["hydra.job.chdir=False".to_string()]);
        assert_eq!(o.words.len(), 9);
        let kinds: Vec<EditKind> = o.edits.iter().map(|e| e.kind).collect();
        use EditKind::*;
        assert_eq!(kinds, vec![Upsert, Override, Append, Delete, Upsert]);
        assert_eq!(o.edits[0].path, vec!["reader", "read_threads"]);
        assert_eq!(o.edits[0].value, Value::Int(8));
        assert_eq!(
            o.edits[2].value,
            Value::List(vec![Value::Int(1), Value::Int(2)])
        );
        assert_eq!(
            o.edits[4].value,
            Value::Map(vec![
                ("mean".into(), Value::Int(1)),
                ("stdev".into(), Value::Float(0.1))
            ])
        );
    }

    #[test]
    fn malformed_words_name_the_word() {
        for word in [
            "++workload.dataset",
            "workload..x=1",
            "++workload.=1",
            "=3",
            "dataset.format=npz",
            "--strict",
            "++workload.a b=1",
            "workload=",
            "++workload.x=[1,",
        ] {
            let err = parse(&[word]).unwrap_err();
            assert_eq!(err.exit_code(), 2, "{word}");
            assert!(err.to_string().contains(word), "{word}: {err}");
        }
    }

    #[test]
    fn hydra_existence_rules() {
        let mut tree = Value::from_yaml("train:\n  epochs: 1\n").unwrap();
        parse(&["workload.train.epochs=3"])
            .unwrap()
            .apply(&mut tree)
            .unwrap();
        assert_eq!(tree.get_path(&["train", "epochs"]), Some(&Value::Int(3)));
        assert!(parse(&["workload.train.seed=3"])
            .unwrap()
            .apply(&mut tree)
            .is_err());
        assert!(parse(&["+workload.train.epochs=3"])
            .unwrap()
            .apply(&mut tree)
            .is_err());
        parse(&["+workload.train.seed=7"])
            .unwrap()
            .apply(&mut tree)
            .unwrap();
        assert_eq!(tree.get_path(&["train", "seed"]), Some(&Value::Int(7)));
        parse(&["~workload.train.seed"])
            .unwrap()
            .apply(&mut tree)
            .unwrap();
        assert_eq!(tree.get_path(&["train", "seed"]), None);
        assert!(parse(&["~workload.train.seed"])
            .unwrap()
            .apply(&mut tree)
            .is_err());
        // Over a scalar, `++` and `+` make a section (Hydra's merge); over a list they fail.
        let mut tree = Value::from_yaml("train:\n  computation_time: 1.0\n  l: [1]\n").unwrap();
        parse(&[
            "++workload.train.computation_time.type=uniform",
            "+workload.train.computation_time.min=1.0",
        ])
        .unwrap()
        .apply(&mut tree)
        .unwrap();
        assert_eq!(
            tree.get_path(&["train", "computation_time"]),
            Some(&Value::Map(vec![
                ("type".into(), Value::Str("uniform".into())),
                ("min".into(), Value::Float(1.0)),
            ]))
        );
        assert!(parse(&["workload.train.epochs.x=1"])
            .unwrap()
            .apply(&mut Value::from_yaml("train:\n  epochs: 1\n").unwrap())
            .is_err());
        let err = parse(&["++workload.train.l.x=1"])
            .unwrap()
            .apply(&mut tree)
            .unwrap_err();
        assert!(
            err.to_string().contains("'workload.train.l' is a list"),
            "{err}"
        );
    }

    #[test]
    fn a_quoted_value_reads_back_as_itself_whatever_it_holds() {
        for text in [
            "results/sweep/trial-4",
            "a,b=c",
            "it's",
            "[x] {y} #z ~w é ü ∂",
            "tail\\",
            "tail\\\\",
            "in\\side",
            "quote\\'after",
            "'",
            "",
            " spaced  out ",
            "$HOME ${x} %s \"double\"",
        ] {
            let quoted = hydra_quoted(text);
            assert_eq!(
                super::super::word_value::parse(&quoted),
                Ok(Value::Str(text.to_string())),
                "{text:?} quoted as {quoted}"
            );
        }
        assert_eq!(hydra_quoted("it's"), "'it\\'s'");
        assert_eq!(hydra_quoted("end\\"), "'end\\\\'");
        // A run folder set as values, and recorded as words that mean the same.
        let mut overrides = Overrides::parse(&["workload=default"]).unwrap();
        overrides.set_run_folder("out/a,b=c'd#é");
        assert_eq!(overrides.hydra_run_dir.as_deref(), Some("out/a,b=c'd#é"));
        let reparsed = Overrides::parse(&overrides.words).unwrap();
        assert_eq!(reparsed.hydra_run_dir, overrides.hydra_run_dir);
        assert_eq!(reparsed.edits[0].value, Value::Str("out/a,b=c'd#é".into()));
        assert_eq!(reparsed.edits[0].path, ["output", "folder"]);
    }
}
