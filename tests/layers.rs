//! The layers of `src/` hold as `src/lib.rs` draws them: every module's uses of other top-level
//! modules (`crate::NAME` paths, `use crate::{…}` groups) point to a lower floor of the drawing,
//! and the drawing names every module once. So no two modules use each other in a loop, and the
//! overview a newcomer reads is the structure the code has. Test-only code (`#[cfg(test)] mod`
//! blocks, `tests.rs` and `testing.rs` files) is left out: a test may use what it checks.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const SRC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src");

/// Each module's floor, as the ```text drawing in lib.rs's overview gives it: a line starts with
/// the floor and its modules, two spaces apart; a line without a floor continues the one above;
/// three spaces or more end the names (what follows describes them).
fn floors_drawn(lib: &str) -> BTreeMap<String, u32> {
    let mut floors = BTreeMap::new();
    let mut floor = 0;
    let mut drawing = false;
    for line in lib.lines().filter_map(|l| l.strip_prefix("//!")) {
        let line = line.strip_prefix(' ').unwrap_or(line);
        if line.starts_with("```") {
            if drawing {
                break;
            }
            drawing = line == "```text";
            continue;
        }
        if !drawing {
            continue;
        }
        let (number, rest) = line.split_at(line.len().min(4));
        if let Ok(n) = number.trim().parse() {
            floor = n;
        }
        let names = rest.trim_start().split("   ").next().unwrap_or("");
        for name in names.split_whitespace() {
            let previous = floors.insert(name.to_string(), floor);
            assert_eq!(previous, None, "lib.rs draws {name} twice");
        }
    }
    floors
}

/// The top-level modules of `src/` and their source files (a module's folder, all of it).
fn modules(src: &Path) -> BTreeMap<String, Vec<PathBuf>> {
    let mut modules = BTreeMap::new();
    for entry in std::fs::read_dir(src).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().into_owned();
        if ["lib", "main", "bin"].contains(&name.as_str()) {
            continue;
        }
        let files: &mut Vec<PathBuf> = modules.entry(name).or_default();
        if path.is_dir() {
            rust_files(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    modules
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Test-only files: declared under `#[cfg(test)]`, they are not layers.
fn test_only(file: &Path) -> bool {
    let name = file.file_name().unwrap().to_string_lossy();
    name == "tests.rs" || name == "testing.rs" || name.ends_with("_tests.rs")
}

/// The text without `//` comments and without `#[cfg(test)] mod NAME { … }` blocks.
fn code_of(text: &str) -> String {
    let uncommented: String = text
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = String::new();
    let mut rest = uncommented.as_str();
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "#[cfg(test)]".len()..];
        let item = after.trim_start();
        let is_mod_block = item
            .strip_prefix("pub(crate) ")
            .or_else(|| item.strip_prefix("pub "))
            .unwrap_or(item)
            .starts_with("mod ")
            && item
                .find('{')
                .is_some_and(|b| item.find(';').is_none_or(|s| b < s));
        if !is_mod_block {
            rest = after;
            continue;
        }
        let open = after.find('{').unwrap();
        let mut depth = 0;
        let mut end = after.len();
        for (i, c) in after[open..].char_indices() {
            depth += match c {
                '{' => 1,
                '}' => -1,
                _ => 0,
            };
            if depth == 0 {
                end = open + i + 1;
                break;
            }
        }
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// The top-level modules `code` names: `crate::NAME…` and each first name of a `use crate::{…}`
/// group's items.
fn used_modules(code: &str) -> BTreeSet<String> {
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut used = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        let after = &code[at + "crate::".len()..];
        if let Some(group) = after.strip_prefix('{') {
            let mut depth = 0;
            let mut item_start = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => item_start = true,
                    c if c.is_whitespace() => {}
                    _ if item_start => {
                        used.insert(ident(&group[i..]));
                        item_start = false;
                    }
                    _ => {}
                }
            }
        } else {
            used.insert(ident(after));
        }
    }
    used
}

#[test]
fn every_use_points_down_the_floors_lib_rs_draws() {
    let src = Path::new(SRC);
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let floors = floors_drawn(&lib);
    let modules = modules(src);
    let drawn: BTreeSet<&String> = floors.keys().collect();
    let present: BTreeSet<&String> = modules.keys().collect();
    assert_eq!(drawn, present, "lib.rs's drawing and src/'s modules differ");
    let mut upward = Vec::new();
    for (module, files) in &modules {
        for file in files.iter().filter(|f| !test_only(f)) {
            let code = code_of(&std::fs::read_to_string(file).unwrap());
            for used in used_modules(&code) {
                let Some(&to) = floors.get(&used) else {
                    continue; // `crate::NAME` where NAME is not a module (a macro, say)
                };
                if used != *module && to >= floors[module] {
                    upward.push(format!(
                        "{} (floor {}) uses {used} (floor {to})",
                        file.strip_prefix(src).unwrap().display(),
                        floors[module]
                    ));
                }
            }
        }
    }
    assert!(
        upward.is_empty(),
        "uses that do not point down the floors of lib.rs:\n{}",
        upward.join("\n")
    );
}

#[test]
fn the_reader_of_uses_sees_groups_and_skips_tests_and_comments() {
    let code = code_of(
        "use crate::{config::{self, Config}, error::Result};\n\
         let x = crate::stats::mean(1); // crate::report::x\n\
         #[cfg(test)]\nmod tests {\n    use crate::run::x;\n    fn f() { {} }\n}\n\
         fn after() { crate::plan::eval_due(); }\n",
    );
    let used: Vec<String> = used_modules(&code).into_iter().collect();
    assert_eq!(used, ["config", "error", "plan", "stats"]);
    let floors = floors_drawn("//! ```text\n//!  2  b  c     text\n//!     d      more\n//!  1  a     the ground\n//! ```\n");
    let expected: BTreeMap<String, u32> = [("a", 1), ("b", 2), ("c", 2), ("d", 2)]
        .into_iter()
        .map(|(n, f)| (n.to_string(), f))
        .collect();
    assert_eq!(floors, expected);
}
