"""What every check_*.py script shares, so that they all take their arguments, find the data files
and report the same way.

A check is run as `check_x.py FOLDER EXPECT_JSON` (check_numpy.py takes options instead). Every
file of the format under FOLDER (recursively) is checked; none may be missing or extra, and no
temporary file (name starting with '.' or ending '.tmp') may be left. The report is one
"FAIL ..." line per failure on stdout, then "N passed, M failed"; the exit code is 0 only when
everything passed, 1 on a failed check, 2 on bad arguments, 3 when a Python package is missing.
"""

import importlib
import json
import os
import sys

# The script's name, as the user ran it, to begin its messages on stderr.
SCRIPT = os.path.basename(sys.argv[0])


def stop(message, code):
    """Ends the script with exit code `code`, saying why on stderr."""
    print(f"{SCRIPT}: {message}", file=sys.stderr)
    sys.exit(code)


def folder_and_expect(argv, doc, parse=json.loads):
    """(FOLDER, the expectations `parse` makes of EXPECT_JSON); ends the script (2) on bad
    arguments, printing `doc` when their number is wrong."""
    if len(argv) != 2:
        print(doc, file=sys.stderr)
        sys.exit(2)
    folder, text = argv
    try:
        return folder, parse(text)
    except (ValueError, KeyError, TypeError) as e:  # json.JSONDecodeError is a ValueError too
        stop(f"bad EXPECT_JSON {text!r}: {e}", 2)


def counts(text, keys=("files", "samples_per_file")):
    """EXPECT_JSON as a dict, with `keys` required and made integers."""
    expect = json.loads(text)
    for key in keys:
        expect[key] = int(expect[key])
    return expect


def modules(install, *names):
    """The modules `names`, imported; ends the script (3) naming the pip packages to `install`
    when one is missing."""
    try:
        return [importlib.import_module(name) for name in names]
    except ImportError as e:
        stop(f"{e}; run: pip install {install}", 3)


def data_files(folder, suffix, skip=()):
    """(sorted paths of the files ending `suffix` under `folder`, temporary files found), the
    top-level folders named in `skip` left out."""
    paths, leftovers = [], []
    for root, dirs, names in os.walk(folder):
        if root == folder:
            dirs[:] = [d for d in dirs if d not in skip]
        for name in names:
            path = os.path.join(root, name)
            if name.startswith(".") or name.endswith(".tmp"):
                leftovers.append(path)
            elif name.endswith(suffix):
                paths.append(path)
    paths.sort()
    return paths, leftovers


def check_files(folder, kind, files, check, suffix=None, skip=(), finish=list):
    """Checks every `kind` file (name ending `suffix`, by default '.' + kind) under `folder` with
    `check(path)`, which returns the file's error messages; reports as the module doc says and
    returns the exit code. `finish()`, called once every file is checked, returns the
    failures that concern the dataset as a whole."""
    if not os.path.isdir(folder):
        stop(f"{folder} is not a folder", 1)
    paths, leftovers = data_files(folder, suffix or "." + kind, skip)
    passed, failed = 0, 0
    for path in paths:
        errors = check(path)
        if errors:
            failed += 1
            for e in errors:
                print(f"FAIL {path}: {e}")
        else:
            passed += 1
    problems = []
    if len(paths) != files:
        problems.append(f"found {len(paths)} {kind} file(s) in {folder}, expected {files}")
    for path in leftovers:
        problems.append(f"temporary file left behind: {path}")
    problems += finish()
    for p in problems:
        print(f"FAIL {p}")
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 and not problems else 1
