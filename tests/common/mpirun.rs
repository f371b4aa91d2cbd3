//! `mpirun` on this host (`--oversubscribe`, as root if need be), every launch bounded in time:
//! the MPI tests' launcher, shared by `mpi` and `upstream`.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use super::{run_bounded, Ran, ISOLATED_ENV};

/// How long any one mpirun may take before the test kills it and fails.
pub const LAUNCH_LIMIT: Duration = Duration::from_secs(120);

/// `mpirun --bind-to none -n PROCESSES BIN ARGS` on this host, killed (and failed) past
/// [`LAUNCH_LIMIT`].
pub fn mpirun<S: AsRef<str>>(
    cwd: &Path,
    processes: usize,
    bin: &str,
    args: &[S],
) -> (Ran, Duration) {
    mpirun_with(cwd, &["--bind-to", "none"], &[], processes, bin, args)
}

/// `mpirun LAUNCHER_ARGS -n PROCESSES BIN ARGS` with `env` added, killed (and failed) past
/// [`LAUNCH_LIMIT`].
pub fn mpirun_with<S: AsRef<str>>(
    cwd: &Path,
    launcher_args: &[&str],
    env: &[(&str, &str)],
    processes: usize,
    bin: &str,
    args: &[S],
) -> (Ran, Duration) {
    let (cmd, what) = mpirun_command(cwd, launcher_args, env, processes, bin, args);
    run_bounded(
        cmd,
        format!("{what} (install Open MPI as .ci/run does: openmpi-bin)"),
        LAUNCH_LIMIT,
    )
}

/// The command `mpirun LAUNCHER_ARGS -n PROCESSES BIN ARGS` with `env` added, and how it is named
/// in messages.
pub fn mpirun_command<S: AsRef<str>>(
    cwd: &Path,
    launcher_args: &[&str],
    env: &[(&str, &str)],
    processes: usize,
    bin: &str,
    args: &[S],
) -> (Command, String) {
    let mut cmd = Command::new("mpirun");
    cmd.current_dir(cwd)
        .args(["--oversubscribe", "--allow-run-as-root"])
        .args(launcher_args)
        .args(["-n", &processes.to_string(), bin])
        .args(args.iter().map(AsRef::as_ref));
    for k in ISOLATED_ENV {
        cmd.env_remove(k);
    }
    cmd.envs(env.iter().copied());
    let what = format!(
        "mpirun {} -n {processes} {} {}",
        launcher_args.join(" "),
        Path::new(bin).file_name().unwrap().to_string_lossy(),
        args.iter().map(AsRef::as_ref).collect::<Vec<_>>().join(" ")
    );
    (cmd, what)
}
