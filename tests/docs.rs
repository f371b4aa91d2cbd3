//! The docs a user learns dlio-rs from say what the binaries have, and the binaries have what the
//! docs say: docs/running.md and docs/configuration.md against `--help` and the configuration's
//! keys.
//!
//! - Every subcommand of `dlio-rs` (its `--help`) is shown run (`dlio-rs SUB` in code), and every
//!   option of each (its `--help`) is named in code: in a command line of that subcommand, or
//!   alone in a code span (the options tables).
//! - Every `dlio-rs SUB` in code names a subcommand, and every option in a command line of
//!   `dlio-rs SUB` (or `dlio_benchmark`) is one that program takes; an option alone in a code span
//!   is one of `dlio-rs`'s or `dlio_benchmark`'s, or one of the other programs the docs name
//!   ([`OTHER_PROGRAMS_OPTIONS`]).
//! - Every key in the first column of configuration.md's tables of keys (honoured, accepted,
//!   aliases) is a key the decoder reads (`config::known_keys`) or an alias (`config::ALIASES`),
//!   and each of those is in such a column, written whole (`model.parallelism.tensor`, not
//!   `.tensor`).
//!
//! "In code" is inside a code span or a fenced block, where the docs show what is typed.

use std::collections::{BTreeMap, BTreeSet};

use crate::common::*;

const DOCS: [&str; 2] = ["docs/running.md", "docs/configuration.md"];

/// Options of programs other than dlio-rs that the docs name alone in a code span: mpirun's (Open
/// MPI), mlpstorage's and cargo's. In their own command lines they are not looked at.
const OTHER_PROGRAMS_OPTIONS: &[&str] = &[
    "--bind-to",
    "--map-by",
    "--oversubscribe",
    "--allow-run-as-root",
    "-x",
    "--mca",
    "--hostfile",
    "-host",
    "--o-direct",
    "--dlio-bin-path",
    "--hosts",
    "--features",
    "--release",
];

fn read(path: &str) -> String {
    std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap()
}

/// The code of a markdown page: each fenced block's lines (a line ending in `\` joined with the
/// next, as the shell does) and each code span (which may go on over a line's end), and whether
/// it is a span.
fn code(page: &str) -> Vec<(String, bool)> {
    let mut code = Vec::new();
    let mut fenced = false;
    let mut continued = String::new();
    let mut prose = String::new();
    let spans = |prose: &mut String, code: &mut Vec<(String, bool)>| {
        let text = std::mem::take(prose);
        let found = text.split('`').skip(1).step_by(2);
        code.extend(found.map(|span| (span.replace('\n', " "), true)));
    };
    for line in page.lines() {
        if line.trim_start().starts_with("```") {
            spans(&mut prose, &mut code);
            fenced = !fenced;
            continue;
        }
        if !fenced {
            prose.push_str(line);
            prose.push('\n');
            continue;
        }
        match line.trim_end().strip_suffix('\\') {
            Some(head) => continued.push_str(head),
            None => code.push((std::mem::take(&mut continued) + line, false)),
        }
    }
    spans(&mut prose, &mut code);
    code
}

/// Whether a word reads as an option: `-n`, `--accelerators` (not `-1`, `---`).
fn is_option(word: &str) -> bool {
    let name = word.trim_start_matches('-');
    (1..=2).contains(&(word.len() - name.len()))
        && name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
}

/// The command lines in a piece of code: for each `dlio-rs SUB` or `dlio_benchmark` in it (a path
/// to either included), the program (`dlio-rs SUB`, `dlio-rs` for its own options, or
/// `dlio_benchmark`) and the options that follow, to the end of the command (`|`, `>`, `;`, `#`).
fn command_lines(code: &str) -> Vec<(String, Vec<String>)> {
    // Quotes, brackets and punctuation around a word are the prose's or the usage's, not its own.
    let tokens: Vec<&str> = code
        .split_whitespace()
        .map(|t| t.trim_matches(|c| "`'\"()[],:.".contains(c)))
        .collect();
    let mut lines = Vec::new();
    for (i, token) in tokens.iter().enumerate() {
        let program = if token.ends_with("dlio_benchmark") {
            "dlio_benchmark".to_string()
        } else if token.ends_with("dlio-rs") {
            match tokens.get(i + 1) {
                Some(sub) if sub.chars().all(|c| c.is_ascii_lowercase()) => {
                    format!("dlio-rs {sub}")
                }
                _ => "dlio-rs".to_string(),
            }
        } else {
            continue;
        };
        let options = tokens[i + 1..]
            .iter()
            .take_while(|t| !["|", "\\|", ">", ";", "&&", "#", "2>&1"].contains(t))
            .map(|t| t.split('=').next().unwrap())
            .filter(|t| is_option(t))
            .map(str::to_string)
            .collect();
        lines.push((program, options));
    }
    lines
}

/// The options of a `--help` text: the first words of its `Options:` lines (`-n, --accelerators
/// <N>`: `-n` and `--accelerators`), without `-h`/`--help`.
fn options_of(help: &str) -> BTreeSet<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Options:"))
        .filter(|l| l.len() - l.trim_start().len() <= 6 && l.trim_start().starts_with('-'))
        .flat_map(|l| {
            let spec = l.trim().split("  ").next().unwrap();
            spec.split([',', ' '])
                .filter(|t| t.starts_with('-'))
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .filter(|o| o != "-h" && o != "--help")
        .collect()
}

/// `dlio-rs`'s subcommands (the `Commands:` of its `--help`, `help` aside) and each one's
/// options; `dlio-rs` alone maps to its own options.
fn binary() -> BTreeMap<String, BTreeSet<String>> {
    let tmp = Scratch::new("docs-help");
    let help = dlio_rs(&tmp.path, &["--help"]).ok().stdout;
    let mut programs = BTreeMap::new();
    programs.insert("dlio-rs".to_string(), options_of(&help));
    let subcommands = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|sub| *sub != "help");
    for sub in subcommands {
        let help = dlio_rs(&tmp.path, &[sub, "--help"]).ok().stdout;
        programs.insert(format!("dlio-rs {sub}"), options_of(&help));
    }
    assert!(programs.len() >= 10, "{programs:?}");
    let bench = launch(DLIO_BENCHMARK, &tmp.path, &["--help"], &[])
        .ok()
        .stdout;
    let bench_options = bench
        .lines()
        .filter(|l| l.trim_start().starts_with('-'))
        .flat_map(|l| l.split([' ', ',', '(', ')', '/', '=']))
        .filter(|t| t.starts_with('-') && t.len() > 1)
        .map(str::to_string)
        .collect();
    programs.insert("dlio_benchmark".to_string(), bench_options);
    programs
}

#[test]
fn the_docs_name_every_subcommand_and_option_and_only_those() {
    let programs = binary();
    let code: Vec<(String, bool)> = DOCS.iter().flat_map(|d| code(&read(d))).collect();
    // What the docs show: options per command line, and options alone in a span.
    let mut shown: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut alone: BTreeSet<String> = BTreeSet::new();
    let mut wrong = Vec::new();
    for (text, span) in &code {
        let lines = command_lines(text);
        if *span && lines.is_empty() && text.starts_with('-') {
            alone.extend(
                text.split([' ', '/', ',', '='])
                    .filter(|t| is_option(t))
                    .map(str::to_string),
            );
        }
        for (program, options) in lines {
            let Some(known) = programs.get(&program) else {
                wrong.push(format!("`{text}`: {program} is not a subcommand"));
                continue;
            };
            for option in &options {
                let help = ["--help", "-h"].contains(&option.as_str());
                if !known.contains(option) && !help {
                    wrong.push(format!("`{text}`: {program} has no option {option}"));
                }
            }
            shown.entry(program).or_default().extend(options);
        }
    }
    let any_option: BTreeSet<&String> = programs.values().flatten().collect();
    for option in &alone {
        if !any_option.contains(option) && !OTHER_PROGRAMS_OPTIONS.contains(&option.as_str()) {
            wrong.push(format!(
                "`{option}` is no option of dlio-rs or dlio_benchmark"
            ));
        }
    }
    for (program, options) in &programs {
        if program.starts_with("dlio-rs ") && !shown.contains_key(program) {
            wrong.push(format!("`{program}` is never shown"));
        }
        for option in options {
            let named = shown.get(program).is_some_and(|o| o.contains(option));
            if !named && !alone.contains(option) && program != "dlio_benchmark" {
                wrong.push(format!("{program} {option} is never named"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} against the binaries:\n  {}",
        DOCS.join(" and "),
        wrong.join("\n  ")
    );
}

/// The headings of configuration.md whose tables list keys in their first column.
const KEY_SECTIONS: [&str; 3] = [
    "## Keys dlio-rs honours",
    "## Aliases",
    "## Keys accepted but not acted on",
];

/// The keys in the first column of configuration.md's tables of keys: each code span there that
/// reads as a key (`model.parallelism.tensor`, `data_reader`; not `model: NAME`).
fn documented_keys(page: &str) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    let mut in_keys = false;
    for line in page.lines() {
        if line.starts_with("## ") {
            in_keys = KEY_SECTIONS.iter().any(|s| line.starts_with(s));
        }
        let Some(first_cell) = line.strip_prefix('|').and_then(|l| l.split('|').next()) else {
            continue;
        };
        if !in_keys {
            continue;
        }
        let spans = first_cell.split('`').skip(1).step_by(2);
        let is_key = |s: &&str| {
            s.split('.').all(|segment| {
                !segment.is_empty()
                    && segment
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            })
        };
        keys.extend(spans.filter(is_key).map(str::to_string));
    }
    keys
}

#[test]
fn configuration_md_documents_every_key_and_only_keys_there_are() {
    let documented = documented_keys(&read("docs/configuration.md"));
    let mut schema: BTreeSet<String> = dlio_rs::config::known_keys().into_iter().collect();
    schema.extend(
        dlio_rs::config::ALIASES
            .iter()
            .map(|(alias, _)| alias.to_string()),
    );
    let missing: Vec<&String> = schema.difference(&documented).collect();
    let unknown: Vec<&String> = documented.difference(&schema).collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "docs/configuration.md's tables of keys:\n  not documented: {missing:?}\n  documented, \
         but no key: {unknown:?}"
    );
}
