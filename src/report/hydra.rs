//! The files Hydra saves for every DLIO run, in `<hydra.run.dir>/<hydra.output_subdir>/`: the resolved
//! configuration (`config.yaml`, root `workload:`), the override words (`overrides.yaml`, which
//! mlpstorage reads to classify a run as CLOSED or OPEN) and Hydra's own settings (`hydra.yaml`).

use std::path::Path;

use crate::config::value::Value;
use crate::config::Source;
use crate::error::{Error, Result};
use crate::folder::Beneath;

fn map(entries: Vec<(&str, Value)>) -> Value {
    Value::Map(
        entries
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    )
}

fn strings(items: &[String]) -> Value {
    Value::List(items.iter().map(|s| Value::Str(s.clone())).collect())
}

pub fn write_all(
    run_dir: &Path,
    subdir: &str,
    source: &Source,
    workload_tree: &Value,
) -> Result<()> {
    // Below the run folder, never through a link planted there (`.hydra -> /etc`).
    let beneath = Beneath::open(run_dir).map_err(|e| Error::io("cannot open", run_dir, e))?;
    let subdir = Path::new(subdir);
    let write = |name: &str, text: String| {
        let relative = subdir.join(name);
        beneath
            .write_atomic(&relative, text.as_bytes())
            .map_err(|e| Error::io("cannot write", &beneath.path(&relative), e))
    };
    let task: Vec<String> = source
        .overrides
        .words
        .iter()
        .filter(|w| !w.trim_start_matches(['+', '~']).starts_with("hydra."))
        .cloned()
        .collect();
    let hydra_words: Vec<String> = source
        .overrides
        .words
        .iter()
        .filter(|w| w.trim_start_matches(['+', '~']).starts_with("hydra."))
        .cloned()
        .collect();
    let config = map(vec![("workload", workload_tree.clone())]);
    write("config.yaml", config.to_yaml())?;
    write("overrides.yaml", strings(&task).to_yaml())?;
    let mut sorted = task.clone();
    sorted.sort();
    let cwd = std::env::current_dir()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let hydra = map(vec![(
        "hydra",
        map(vec![
            (
                "run",
                map(vec![("dir", Value::Str(run_dir.display().to_string()))]),
            ),
            ("mode", Value::Str("RUN".into())),
            ("output_subdir", Value::Str(subdir.display().to_string())),
            (
                "overrides",
                map(vec![
                    ("hydra", strings(&hydra_words)),
                    ("task", strings(&task)),
                ]),
            ),
            (
                "job",
                map(vec![
                    ("name", Value::Str("dlio_benchmark".into())),
                    ("chdir", Value::Null),
                    ("override_dirname", Value::Str(sorted.join(","))),
                    ("config_name", Value::Str("config".into())),
                ]),
            ),
            (
                "runtime",
                map(vec![
                    (
                        "version",
                        Value::Str(format!("dlio-rs {}", env!("CARGO_PKG_VERSION"))),
                    ),
                    ("cwd", Value::Str(cwd)),
                    ("output_dir", Value::Str(run_dir.display().to_string())),
                    (
                        "choices",
                        map(vec![(
                            "workload",
                            Value::Str(source.workload_name().to_string()),
                        )]),
                    ),
                ]),
            ),
            ("verbose", Value::Bool(false)),
        ]),
    )]);
    write("hydra.yaml", hydra.to_yaml())
}
