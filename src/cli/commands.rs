//! One function per subcommand of `dlio-rs`: each takes its words ([`super::args`]), does the
//! work through the modules below, and prints its result on standard output: text for people,
//! or with `--output-format json|csv` one document for machines ([`crate::machine`]), the text
//! of `run`, `sweep` and `compare` then going to standard error. Each returns the signal that
//! stopped it, if one did (`run`, `sweep`), for the exit code; `audit` returns its exit code
//! itself (1 when the audit found something wrong).

use std::path::Path;

use serde_json::json;

use super::args::{
    AuditArgs, CompareArgs, ConfigArgs, DatasizeArgs, PlanArgs, PrintConfigArgs, ReportArgs,
    RunArgs, SweepArgs, WorkloadsArgs,
};
use crate::config::overrides::Overrides;
use crate::config::{workloads, Config, Source};
use crate::console::{print_error, print_out, tell};
use crate::error::{Error, Result};
use crate::machine::{document, print_json, show, OutputFormat};
use crate::plan::{draw_run_entropy, Phase};
use crate::preview::{preview, PreviewRequest};
use crate::run::RunOptions;
use crate::sweep::SweepRequest;

/// Where the words and `--config-dir` say the workload comes from.
pub(super) fn source(args: &ConfigArgs) -> Result<Source> {
    Ok(Source {
        overrides: Overrides::parse(&words(args)?)?,
        config_dir: args.config_dir.clone(),
    })
}

/// The override words of `args`: those given, then the words its options stand for (`--odirect`,
/// `--page-cache`), so that they reach overrides.yaml, a sweep's trials and every hint that
/// repeats the words. An option and a word for the same key are refused rather than one
/// silently winning.
fn words(args: &ConfigArgs) -> Result<Vec<String>> {
    let given = Overrides::parse(&args.words)?;
    let options = [
        (
            args.odirect.then(|| ("--odirect".to_string(), "True")),
            "odirect",
        ),
        (
            args.page_cache
                .as_deref()
                .map(|mode| (format!("--page-cache {mode}"), mode)),
            "page_cache",
        ),
    ];
    let mut words = args.words.clone();
    for (option, key) in options {
        let Some((option, value)) = option else {
            continue;
        };
        // `data_reader` is DLIO's other name for the section.
        let same_key = |path: &[String]| {
            path.len() == 2
                && ["reader", "data_reader"].contains(&path[0].as_str())
                && path[1] == key
        };
        if let Some(edit) = given.edits.iter().find(|edit| same_key(&edit.path)) {
            return Err(Error::usage(format!(
                "{option} and the word '{}' both name workload.reader.{key}: give one of them",
                edit.word
            )));
        }
        words.push(format!("++workload.reader.{key}={value}"));
    }
    Ok(words)
}

/// Runs a run with SIGINT and SIGTERM stopping it cleanly ([`crate::interrupt`]); returns the
/// signal it stopped for.
pub(super) fn stoppable_run(source: &Source, options: &RunOptions) -> Result<Option<i32>> {
    watch_signals()?;
    crate::run::run(source, options).map(|outcome| outcome.stopped_by)
}

/// SIGINT and SIGTERM stop a run or a sweep cleanly from here on.
fn watch_signals() -> Result<()> {
    crate::interrupt::watch()
        .map_err(|e| Error::run(format!("cannot watch for SIGINT and SIGTERM: {e}")))
}

/// `dlio-rs run`.
pub(super) fn run(args: &RunArgs) -> Result<Option<i32>> {
    let format = args.output.format(false)?;
    let options = RunOptions {
        accelerators: args.accelerators,
        quiet: args.quiet,
        table: true,
        strict: args.config.strict,
        verify: args.verify,
        trace: args.trace,
        trace_format: args.trace_format,
        metrics_listen: args.metrics_listen,
        wait: args.wait.map(std::time::Duration::from_secs_f64),
        human: format.human(),
    };
    let source = source(&args.config)?;
    watch_signals()?;
    let outcome = crate::run::run(&source, &options)?;
    // Only the process that speaks for the run (process 0 of an MPI job) writes the document.
    if outcome.speaks {
        print_run(&outcome, format)?;
    }
    // Only the process that judged the run has its verdict (process 0 of an MPI job).
    let verdict = outcome.results.as_ref().map(|r| &r.verdict);
    match verdict {
        Some(verdict) if args.check && outcome.stopped_by.is_none() && verdict.fails_check() => {
            Err(Error::run(format!("--check: {}", verdict.line())))
        }
        _ => Ok(outcome.stopped_by),
    }
}

/// A run's document: its output folder, what it generated, and report.json's content (`null`
/// for a run that only generated); or its per-epoch table.
fn print_run(outcome: &crate::run::Outcome, format: OutputFormat) -> Result<()> {
    match format {
        OutputFormat::Text => Ok(()),
        OutputFormat::Json => print_json(&document(
            "run",
            json!({
                "output_folder": outcome.output_folder,
                "generated": outcome.generated.map(|g| json!({
                    "files": g.files,
                    "bytes": g.bytes,
                    "seconds": g.seconds,
                })),
                "report": outcome.report,
            }),
        )),
        OutputFormat::Csv => {
            let empty = serde_json::Value::Null;
            let report = outcome.report.as_ref().unwrap_or(&empty);
            print_out(&crate::report::ours::epochs_csv(report))
        }
    }
}

/// The configuration the words resolve to, with a warning for each unknown key.
fn resolve_and_warn(args: &ConfigArgs) -> Result<Config> {
    let resolved = source(args)?.resolve(args.strict)?;
    for key in &resolved.unknown_keys {
        tell(format_args!(
            "warning: unknown configuration key workload.{key}{}",
            crate::config::suggest::key_hint(key)
        ));
    }
    Ok(resolved)
}

/// The first line of `config --workload-file`: what the file is for.
const WORKLOAD_FILE_HEADER: &str = "# a workload resolved by dlio-rs config: save it as \
     DIR/workload/NAME.yaml and run it with --config-dir DIR workload=NAME\n";

/// `dlio-rs config`: the resolved workload as YAML, refused where `run` would refuse it: under
/// the `workload:` root of config.yaml, or as a workload file.
pub(super) fn config(args: &PrintConfigArgs) -> Result<Option<i32>> {
    let resolved = resolve_and_warn(&args.config)?;
    resolved.check_supported()?;
    crate::format::for_config(&resolved, false)?;
    let text = if args.workload_file {
        format!("{WORKLOAD_FILE_HEADER}{}", resolved.tree.to_yaml())
    } else {
        let tree = crate::config::value::Value::Map(vec![("workload".into(), resolved.tree)]);
        tree.to_yaml()
    };
    print_out(&text).map(|()| None)
}

/// `dlio-rs plan`: the training plan of one rank and epoch, and the checkpoint plan, as the
/// workflow has them.
pub(super) fn plan(args: &PlanArgs) -> Result<Option<i32>> {
    let format = args.output.format(false)?;
    let resolved = resolve_and_warn(&args.config)?;
    if format == OutputFormat::Csv && !resolved.workflow.train {
        return Err(Error::usage(format!(
            "plan --output-format csv lists the training batches, and workload {} does not train \
             (workload.workflow.train = False): use --output-format json for its checkpoint plan",
            resolved.workload_name
        )));
    }
    // The worlds `run` refuses, `plan` refuses alike.
    crate::comm::check_world(args.accelerators)?;
    if resolved.workflow.train {
        crate::run::check_steps(&resolved, args.accelerators)?;
    }
    let request = PreviewRequest {
        world: args.accelerators,
        epoch: args.epoch,
        rank: args.rank,
        phase: if args.eval { Phase::Eval } else { Phase::Train },
        head: args.head,
        full: args.full,
    };
    let training = match resolved.workflow.train {
        true => Some(preview(&resolved, &request, draw_run_entropy())?),
        false => None,
    };
    let (world, rank) = (args.accelerators, args.rank);
    match format {
        OutputFormat::Text => {
            if let Some(training) = &training {
                print_out(&training.render())?;
            }
            if resolved.workflow.checkpoint {
                print_out(&crate::checkpoint::preview::render(&resolved, world, rank)?)?;
            }
        }
        OutputFormat::Json => {
            let checkpoint = match resolved.workflow.checkpoint {
                true => Some(crate::checkpoint::preview::to_json(&resolved, world, rank)?),
                false => None,
            };
            print_json(&document(
                "plan",
                json!({
                    "workload": resolved.workload_name,
                    "training": training.as_ref().map(|t| t.to_json()),
                    "checkpoint": checkpoint,
                }),
            ))?;
        }
        // A workload that does not train was refused above.
        OutputFormat::Csv => print_out(&training.map(|t| t.to_csv()).unwrap_or_default())?,
    }
    Ok(None)
}

/// `dlio-rs datasize`: the rule's answer for the workload the words (or mlpstorage's model and
/// accelerator type) name.
pub(super) fn datasize(args: &DatasizeArgs) -> Result<Option<i32>> {
    let format = args.output.format(args.json)?;
    if format == OutputFormat::Csv {
        return Err(Error::usage(
            "datasize has no table to write as CSV: --output-format text or json",
        ));
    }
    let cluster = crate::datasize::Cluster {
        max_accelerators: args.max_accelerators,
        host_memory_gib: args.client_host_memory_in_gb,
        client_hosts: args.num_client_hosts,
    };
    let mut words = words(&args.config)?;
    if let (Some(model), Some(accelerator)) = (&args.model, &args.accelerator_type) {
        if words.iter().any(|w| w.starts_with("workload=")) {
            return Err(Error::usage(
                "--model and --accelerator-type name the workload: give them or a workload= \
                 word, not both",
            ));
        }
        words.insert(0, format!("workload={model}_{accelerator}"));
    }
    let source = Source {
        overrides: Overrides::parse(&words)?,
        config_dir: args.config.config_dir.clone(),
    };
    let resolved = source.resolve(args.config.strict)?;
    if !resolved.workflow.train {
        return Err(Error::usage(format!(
            "workload {} does not train (workflow.train: False, a checkpoint workload): it reads \
             no dataset, so the rule has nothing to size",
            resolved.workload_name
        )));
    }
    let size = crate::datasize::Datasize::compute(&resolved, &cluster);
    size.check_within_bounds()?;
    if format == OutputFormat::Json {
        // Printed as before `--output-format` came, without `command` and `schema`: scripts
        // read `datasize --json` already.
        let value = json!({
            "workload": resolved.workload_name,
            "max_accelerators": cluster.max_accelerators,
            "client_hosts": cluster.client_hosts,
            "client_host_memory_gib": cluster.host_memory_gib,
            "num_files_train": size.files,
            "num_subfolders_train": size.subfolders,
            "disk_bytes": size.disk_bytes,
            "file_bytes": size.file_bytes,
            "files_for_memory": size.files_for_memory,
            "files_for_steps": size.files_for_steps,
            "memory_bytes_times_5": size.memory_bytes,
            "suggested_subfolders": size.suggested_subfolders(),
        });
        print_out(&format!("{value:#}\n"))?;
    } else {
        print_out(&size.render(&resolved, &cluster, &words))?;
    }
    Ok(None)
}

/// `dlio-rs sweep`: runs (or continues) the sweep; process 0 prints its table.
pub(super) fn sweep(args: &SweepArgs) -> Result<Option<i32>> {
    let format = args.format.format(false)?;
    let request = SweepRequest {
        words: words(&args.config)?,
        config_dir: args.config.config_dir.clone(),
        min: args.min_accelerators,
        max: args.max_accelerators,
        precision: args.precision,
        step: args.step,
        hold: args.hold,
    };
    watch_signals()?;
    let swept = crate::sweep::sweep(&request, &args.output, args.config.strict)?;
    if !swept.speaks {
        return Ok(swept.stopped);
    }
    show(&swept.sweep.render(), format.human())?;
    match format {
        OutputFormat::Text => {}
        OutputFormat::Json => print_json(&document(
            "sweep",
            json!({
                "output": args.output,
                "stopped_by": swept.stopped.map(crate::interrupt::name),
                "answer_text": swept.sweep.answer_text(),
                "sweep": swept.sweep,
            }),
        ))?,
        OutputFormat::Csv => print_out(&swept.sweep.to_csv())?,
    }
    if swept.stopped.is_some() {
        tell(format_args!(
            "the sweep was interrupted; its trials are in {}: run the same command to continue",
            args.output.join("sweep.json").display()
        ));
    }
    Ok(swept.stopped)
}

/// `dlio-rs report`: rebuilds the page of a run's (or a sweep's) folder, and with `--png` its
/// charts as image files.
pub(super) fn report(args: &ReportArgs) -> Result<Option<i32>> {
    let folder = &args.output_dir;
    let page = match crate::sweep::saved(folder)? {
        Some(sweep) => crate::sweep::page(&sweep),
        None => crate::report::html::from_folder(folder)?,
    };
    let path = folder.join("report.html");
    crate::report::write_atomic(&path, page.as_bytes())?;
    let mut written = vec![path];
    if args.png {
        crate::folder::remove_charts(&folder.join(crate::folder::CHARTS_DIR))?;
        written.extend(crate::report::png::charts(&page, folder)?);
    }
    let list: String = written
        .iter()
        .map(|p| format!("{}\n", p.display()))
        .collect();
    print_out(&list).map(|()| None)
}

/// `dlio-rs compare`: the comparison on standard output (or standard error beside its
/// document), the page in `--html`.
pub(super) fn compare(args: &CompareArgs) -> Result<Option<i32>> {
    use crate::report::compare::{compare, RunFiles};
    let format = args.output.format(false)?;
    let a = RunFiles::read(&args.a)?;
    let b = RunFiles::read(&args.b)?;
    let comparison = compare(a, b, args.different_workloads)?;
    let html: &Path = &args.html;
    // Under a temporary name, then renamed: a link or a FIFO where the page goes is replaced,
    // never written through (or waited on).
    crate::report::write_atomic(html, comparison.page().as_bytes())?;
    show(
        &format!("{}\nPage: {}\n", comparison.render(), html.display()),
        format.human(),
    )?;
    match format {
        OutputFormat::Text => {}
        OutputFormat::Json => print_json(&document("compare", comparison.to_json(html)))?,
        OutputFormat::Csv => print_out(&comparison.to_csv())?,
    }
    Ok(None)
}

/// `dlio-rs workloads`: the shipped workloads, one line each (or a JSON list, or a CSV table,
/// of name and description).
pub(super) fn workloads(args: &WorkloadsArgs) -> Result<Option<i32>> {
    let shipped = workloads::SHIPPED
        .iter()
        .map(|(name, text)| (*name, workloads::description(text)));
    let out = match args.output.format(false)? {
        OutputFormat::Text => shipped
            .map(|(name, description)| format!("{name:<20} {description}\n"))
            .collect(),
        OutputFormat::Json => {
            let list: Vec<_> = shipped
                .map(|(name, description)| json!({"name": name, "description": description}))
                .collect();
            format!(
                "{:#}\n",
                document("workloads", json!({ "workloads": list }))
            )
        }
        OutputFormat::Csv => {
            let mut csv = crate::machine::Csv::new(&["name", "description"]);
            for (name, description) in shipped {
                csv.row([name.to_string(), description.to_string()]);
            }
            csv.finish()
        }
    };
    print_out(&out).map(|()| None)
}

/// `dlio-rs audit`: the audit's report, and its exit code (0 passed, 1 failed, 2 misused).
pub(super) fn audit(args: &AuditArgs) -> i32 {
    let json = match args.output.format(args.json) {
        Ok(OutputFormat::Csv) => {
            return print_error(&Error::usage(
                "audit has no table to write as CSV: --output-format text or json",
            ))
        }
        Ok(format) => format == OutputFormat::Json,
        Err(e) => return print_error(&e),
    };
    let report = match crate::audit::audit(&args.output_dir) {
        Ok(report) => report,
        Err(e) => return print_error(&e),
    };
    let printed = match json {
        true => print_out(&format!("{:#}\n", report.to_json())),
        false => print_out(&report.to_text()),
    };
    match printed {
        Err(e) => print_error(&e),
        // The report already says why; no error line on top.
        Ok(()) => i32::from(!report.passed),
    }
}

/// The exit code of a command that returned `outcome`: a run a signal stopped (in any of its
/// processes) exits as the signal says (130, 143), even when it reported what it completed.
pub(super) fn exit_code(outcome: Result<Option<i32>>) -> i32 {
    match outcome {
        Ok(stopped_by) => match stopped_by.or_else(crate::interrupt::received) {
            Some(signal) => crate::interrupt::exit_code(signal),
            // Said when it failed; the results are in the run's files.
            None if crate::console::stdout_failed() => 1,
            None => 0,
        },
        Err(e) => print_error(&e),
    }
}
