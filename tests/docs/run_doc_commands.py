#!/usr/bin/python3
"""Run every command that README.md and docs/*.md show, and compare the output's shape.

Which blocks: fenced code blocks whose info string is `console`. In such a block a line that
starts with `$ ` is a command (a line ending in `\\` continues it on the next line); the lines up
to the next `$ ` are its expected output. A command must not hold a placeholder (`…`).

Markers: HTML comments on the lines right before the block (blank lines between are allowed),
one or more of them:

  <!-- doc-test: skip REASON -->    the block is not run; REASON is required (what it needs:
                                    root services, a Slurm cluster, systemd, a browser, apt,
                                    the network; and which other test covers it)
  <!-- doc-test: env=gpu -->        runs with the fake NVML of the tests (--fake-nvml) and the
                                    scenario `scenario=NAME` (tests/fakes/scenarios/NAME.json;
                                    default nvidia_three_gpus); one comment may hold several
                                    settings: <!-- doc-test: env=gpu scenario=nvidia_workload -->
  <!-- doc-test: cwd=repo -->       runs in the repository root instead of the file's directory
  <!-- doc-test: status=N -->       every command of the block must exit with N (default 0)

A marker that is not right before a console block, an unknown setting and a skip without a reason
are errors.

How: the blocks of one file run in order, in one fresh temporary directory per file (a block may
use what an earlier block of the same file made), each command in its own `bash -o pipefail -c`
with stdin from /dev/null, stdout and stderr into two files, a timeout of 60 s, and PATH starting
with the directories of --sonde and --workload. Inherited SONDE_* and SLURM_* variables are
removed; XDG_CONFIG_HOME is an empty directory and SONDE_PLUGIN_PATH is empty, so no
configuration or plugin of the user's is read. Outside env=gpu, the GPU libraries point at a file
that does not exist, so a machine with GPUs prints what the docs show for a machine without.
Processes a command leaves in the background (`sonde serve … &`) are ended when the file is done.

The shape rule: numbers, times, paths, pids, host names and sizes may differ; a missing or
renamed line, a changed heading, or a wrong command fails. Each line has a *label*:

  1. the line without colour escapes and without leading and trailing blanks;
  2. cut at the first column gap (two or more blanks, or a tab);
  3. cut at the first digit, `[` or `|`;
  4. at most its first two words, blanks normalised.

So `  CPU time     user 1.53 s, system 1.47 s (wait4)` has the label `CPU time`,
`sonde summary (process level, 16 ticks)` has `sonde summary`, `  tags         none` has `tags`,
and a row that starts with a number (a pid, a time) has none.

Every expected line with a label must match the label of an actual line, in the same order;
actual lines in between are allowed. stdout and stderr are read apart and each keeps its order
(into a file a program's stdout is block-buffered, so the order in which its lines and its stderr
lines arrive is not the terminal's). Not checked: lines without a label, lines that are only `…`
or `...` (the docs' cuts), and two lines of sonde's summary that come and go with the machine's
load and timing (CONDITIONAL below). An actual line also has a second label, made after this
machine's host name and user name in it were written as `vm` and `root`, the names on the
machine the docs' outputs were captured on. The exit status must be 0, or N where the block says
status=N.

Prints one line per command (ok, skip with its reason, FAIL with file:line, the command, the
expected and the actual output) and exits 1 on any failure, 2 on a malformed document.

  /usr/bin/python3 tests/docs/run_doc_commands.py --sonde build/sonde \\
      --workload build/tests/sonde-test-workload \\
      --fake-nvml build/tests/fakes/nvml/libnvidia-ml.so.1 --scenarios tests/fakes/scenarios
"""

import argparse
import getpass
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

COMMAND_TIMEOUT_S = 60
DEFAULT_SCENARIO = "nvidia_three_gpus"
DOCS_HOST = "vm"  # the machine the outputs in the docs were captured on
DOCS_USER = "root"

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([^`]*)$")
MARKER = re.compile(r"^\s*<!--\s*doc-test:(.*?)-->\s*$")
ANY_MARKER = re.compile(r"doc-test:")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Za-z0-9]|\x1b[=>78]")
GAP = re.compile(r"\s{2,}|\t")
CUT = re.compile(r"[0-9\[|]")
ELISION = {"…", "..."}
# Lines sonde prints only when the figures call for them: the line under the node-saturated tag
# (the machine's load), and the CPU time outside every listed process (at least 5 ms of it).
# Shown in the docs as captured, not required in the output.
CONDITIONAL = ("the node was busy", "not in any row above:")


class DocError(Exception):
    """A document the script cannot run as written (a malformed marker or block)."""


@dataclass
class Command:
    line: int  # 1-based line of the `$ ` in the file
    text: str  # the command as bash gets it
    expected: list = field(default_factory=list)  # [(line number, text)]


@dataclass
class Block:
    line: int  # the opening fence
    skip: str = ""  # the reason, when skipped
    gpu: bool = False
    scenario: str = DEFAULT_SCENARIO
    cwd_repo: bool = False
    status: int = 0
    commands: list = field(default_factory=list)


def parse_marker(text, where, block):
    text = text.strip()
    if text.startswith("skip"):
        reason = text[len("skip"):].strip()
        if not reason:
            raise DocError(f"{where}: `doc-test: skip` needs a reason")
        block.skip = reason
        return
    if not text:
        raise DocError(f"{where}: empty doc-test marker")
    for item in text.split():
        key, sep, value = item.partition("=")
        if not sep or not value:
            raise DocError(f"{where}: doc-test marker: expected KEY=VALUE or skip REASON, "
                           f"got '{item}'")
        if key == "env":
            if value != "gpu":
                raise DocError(f"{where}: doc-test marker: env={value}: only env=gpu is known")
            block.gpu = True
        elif key == "scenario":
            if not re.fullmatch(r"[A-Za-z0-9_.-]+", value):
                raise DocError(f"{where}: doc-test marker: bad scenario name '{value}'")
            block.scenario = value
        elif key == "cwd":
            if value != "repo":
                raise DocError(f"{where}: doc-test marker: cwd={value}: only cwd=repo is known")
            block.cwd_repo = True
        elif key == "status":
            if not value.isdigit() or int(value) > 255:
                raise DocError(f"{where}: doc-test marker: status={value}: expected 0 to 255")
            block.status = int(value)
        else:
            raise DocError(f"{where}: doc-test marker: unknown setting '{key}'")
    if block.scenario != DEFAULT_SCENARIO and not block.gpu:
        raise DocError(f"{where}: doc-test marker: scenario= without env=gpu")


def parse_commands(body, first_line, name, block):
    """body: the lines between the fences; first_line: the file's line number of body[0]."""
    i = 0
    while i < len(body):
        text = body[i]
        if not text.strip():
            i += 1
            continue
        if not text.startswith("$ "):
            if block.commands:
                block.commands[-1].expected.append((first_line + i, text))
                i += 1
                continue
            if block.skip:
                i += 1
                continue
            raise DocError(f"{name}:{first_line + i}: console block: output before the first "
                           "`$ ` command")
        cmd = Command(line=first_line + i, text=text[2:])
        while cmd.text.endswith("\\") and i + 1 < len(body):
            i += 1
            cmd.text += "\n" + body[i]
        if "…" in cmd.text and not block.skip:
            raise DocError(f"{name}:{cmd.line}: a placeholder (…) in a command that is run")
        block.commands.append(cmd)
        i += 1


def parse_file(path, name):
    lines = path.read_text(encoding="utf-8").split("\n")
    blocks = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            if ANY_MARKER.search(lines[i]) and MARKER.match(lines[i]):
                # A marker: the next non-blank, non-marker line must open a console block.
                j = i + 1
                while j < len(lines) and (not lines[j].strip() or MARKER.match(lines[j])):
                    j += 1
                nxt = FENCE.match(lines[j]) if j < len(lines) else None
                if not nxt or nxt.group(2).strip() != "console":
                    raise DocError(f"{name}:{i + 1}: doc-test marker not right before a "
                                   "```console block")
            i += 1
            continue
        fence, info = m.group(1), m.group(2).strip()
        start = i
        i += 1
        body = []
        closing = re.compile(r"^ {0,3}" + re.escape(fence[0]) + "{" + str(len(fence)) + r",}\s*$")
        while i < len(lines) and not closing.match(lines[i]):
            body.append(lines[i])
            i += 1
        if i >= len(lines):
            raise DocError(f"{name}:{start + 1}: code block not closed")
        i += 1  # past the closing fence
        if info != "console":
            continue
        block = Block(line=start + 1)
        k = start - 1
        markers = []
        while k >= 0 and (not lines[k].strip() or MARKER.match(lines[k])):
            mm = MARKER.match(lines[k])
            if mm:
                markers.append((k + 1, mm.group(1)))
            k -= 1
        for line_no, text in reversed(markers):
            parse_marker(text, f"{name}:{line_no}", block)
        parse_commands(body, start + 2, name, block)
        if not block.commands and not block.skip:
            raise DocError(f"{name}:{start + 1}: console block without a `$ ` command")
        blocks.append(block)
    return blocks


def label(line):
    text = ANSI.sub("", line).strip()
    m = GAP.search(text)
    if m:
        text = text[: m.start()]
    m = CUT.search(text)
    if m:
        text = text[: m.start()]
    return " ".join(text.split()[:2])


def names_as_in_docs(text):
    """The line with this machine's host and user names written as the docs' machine's."""
    out = text
    host = socket.gethostname()
    for mine, docs in ((host, DOCS_HOST), (host.split(".")[0], DOCS_HOST),
                       (getpass.getuser(), DOCS_USER)):
        if mine and mine != docs:
            out = re.sub(r"(?<![\w.-])" + re.escape(mine) + r"(?![\w-])", docs, out)
    return out


def labels_of(text):
    out = []
    for line in text.split("\n"):
        raw = label(line)
        if raw:
            out.append((raw, label(names_as_in_docs(line))))
    return out


def compare(expected, stdout, stderr):
    """None when the shape matches, else the expected (line number, text) that was not found.

    stdout and stderr are read apart (a program's stdout into a file is block-buffered, so the
    order in which its lines and its stderr reach one file is not the terminal's): each expected
    line must match a line of one of them, in the order of each. The search keeps every pair of
    positions (in stdout, in stderr) that no other pair reached with both positions lower."""
    streams = (labels_of(stdout), labels_of(stderr))
    frontier = {(0, 0)}
    for line_no, text in expected:
        if text.strip() in ELISION or text.strip().startswith(CONDITIONAL):
            continue
        want = label(text)
        if not want:
            continue
        reached = set()
        for pos in frontier:
            for s, lines in enumerate(streams):
                i = pos[s]
                while i < len(lines) and want not in lines[i]:
                    i += 1
                if i < len(lines):
                    reached.add((i + 1, pos[1]) if s == 0 else (pos[0], i + 1))
        frontier = {p for p in reached
                    if not any(q != p and q[0] <= p[0] and q[1] <= p[1] for q in reached)}
        if not frontier:
            return (line_no, text)
    return None


def base_env(args, scratch):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SONDE_", "SLURM_"))}
    dirs = [str(Path(args.sonde).resolve().parent)]
    if args.workload:
        dirs.append(str(Path(args.workload).resolve().parent))
    env["PATH"] = os.pathsep.join(dirs + [env.get("PATH", "/usr/local/bin:/usr/bin:/bin")])
    config = scratch / ".config"
    config.mkdir(exist_ok=True)
    env["XDG_CONFIG_HOME"] = str(config)
    env["SONDE_PLUGIN_PATH"] = ""
    env["SONDE_NVML_LIBRARY"] = "/nonexistent/libnvidia-ml.so.1"
    env["SONDE_ROCM_SMI_LIBRARY"] = "/nonexistent/librocm_smi64.so"
    env.setdefault("LANG", "C.UTF-8")
    return env


def gpu_env(env, args, scenario):
    if not args.fake_nvml or not args.scenarios:
        return None, "env=gpu needs --fake-nvml and --scenarios"
    path = Path(args.scenarios) / f"{scenario}.json"
    if not path.is_file():
        return None, f"no scenario file {path}"
    env = dict(env)
    env["SONDE_NVML_LIBRARY"] = str(Path(args.fake_nvml).resolve())
    env["SONDE_FAKE_GPU_SCENARIO"] = str(path.resolve())
    env["SONDE_FAKE_GPU_PIDS"] = f"{os.getpid()},1,1"  # env:0, env:1, env:2 of the scenarios
    return env, ""


def end_groups(groups):
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = False
        for pgid in groups:
            try:
                os.killpg(pgid, sig)
                alive = True
            except (ProcessLookupError, PermissionError):
                pass
        if not alive:
            return
        time.sleep(0.3)


def show(text, prefix="    | "):
    lines = text.rstrip("\n").split("\n") if text.strip() else ["(nothing)"]
    return "\n".join(prefix + line for line in lines)


def first_line(cmd):
    text = cmd.text.split("\n")[0]
    return text if len(text) <= 100 else text[:97] + "..."


def run_file(path, name, blocks, args, repo, counts):
    scratch = Path(tempfile.mkdtemp(prefix="sonde-docs-"))
    groups = []
    try:
        env = base_env(args, scratch)
        for block in blocks:
            for cmd in block.commands:
                where = f"{name}:{cmd.line}"
                if block.skip:
                    counts["skip"] += 1
                    print(f"skip  {where}  {first_line(cmd)}  ({block.skip})", flush=True)
                    continue
                cmd_env, why = (gpu_env(env, args, block.scenario) if block.gpu else (env, ""))
                if cmd_env is None:
                    counts["fail"] += 1
                    print(f"FAIL  {where}  {first_line(cmd)}\n    {why}", flush=True)
                    continue
                out_path = scratch / ".doc-test-stdout"
                err_path = scratch / ".doc-test-stderr"
                t0 = time.monotonic()
                with open(out_path, "wb") as out, open(err_path, "wb") as err:
                    proc = subprocess.Popen(["bash", "-o", "pipefail", "-c", cmd.text],
                                            cwd=repo if block.cwd_repo else scratch, env=cmd_env,
                                            stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                            start_new_session=True)
                    groups.append(proc.pid)
                    timed_out = False
                    try:
                        status = proc.wait(timeout=COMMAND_TIMEOUT_S)
                    except subprocess.TimeoutExpired:
                        timed_out = True
                        end_groups([proc.pid])
                        status = proc.wait()
                elapsed = time.monotonic() - t0
                stdout = out_path.read_bytes().decode("utf-8", errors="replace")
                stderr = err_path.read_bytes().decode("utf-8", errors="replace")
                actual = "\n".join(part for part in (
                    stdout.rstrip("\n") if stdout.strip() else "",
                    "-- stderr --\n" + stderr.rstrip("\n") if stderr.strip() else "") if part)
                problem = ""
                if timed_out:
                    problem = f"still running after {COMMAND_TIMEOUT_S} s"
                elif status != block.status:
                    problem = f"exit status {status}, expected {block.status}"
                else:
                    missing = compare(cmd.expected, stdout, stderr)
                    if missing:
                        problem = (f"{name}:{missing[0]}: no line like '{missing[1].strip()}' "
                                   f"(label '{label(missing[1])}') in the output, in this order")
                if problem:
                    counts["fail"] += 1
                    expected_text = "\n".join(t for _, t in cmd.expected)
                    print(f"FAIL  {where}  ({elapsed:.1f} s)\n    command:\n{show(cmd.text)}\n"
                          f"    {problem}\n    expected:\n{show(expected_text)}\n"
                          f"    actual:\n{show(actual)}", flush=True)
                else:
                    counts["ok"] += 1
                    print(f"ok    {where}  {first_line(cmd)}  ({elapsed:.1f} s)", flush=True)
                    if args.show:
                        print(show(actual), flush=True)
    finally:
        end_groups(groups)
        if args.keep:
            print(f"      {name}: kept {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sonde", required=True, help="the sonde binary to test")
    parser.add_argument("--workload", help="sonde-test-workload (its directory goes on PATH)")
    parser.add_argument("--fake-nvml", help="the fake libnvidia-ml.so.1 of tests/fakes (env=gpu)")
    parser.add_argument("--scenarios",
                        help="the scenario directory, tests/fakes/scenarios (env=gpu)")
    parser.add_argument("--repo", default=str(Path(__file__).resolve().parents[2]),
                        help="the repository root (default: two folders above this script)")
    parser.add_argument("--only", action="append", default=[],
                        help="only this file (README.md, docs/tour.md); repeatable")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directories")
    parser.add_argument("--show", action="store_true", help="print every command's output")
    args = parser.parse_args()

    repo = Path(args.repo).resolve()
    if not os.access(args.sonde, os.X_OK):
        print(f"run_doc_commands: --sonde {args.sonde}: not an executable file", file=sys.stderr)
        return 2
    files = [repo / "README.md"] + sorted((repo / "docs").glob("*.md"))
    if args.only:
        files = [f for f in files if str(f.relative_to(repo)) in args.only]
        if not files:
            print(f"run_doc_commands: no such document: {', '.join(args.only)}", file=sys.stderr)
            return 2
    try:
        names = [str(f.relative_to(repo)) for f in files]
        parsed = [(f, name, parse_file(f, name)) for f, name in zip(files, names)]
    except DocError as e:
        print(f"run_doc_commands: {e}", file=sys.stderr)
        return 2

    counts = {"ok": 0, "skip": 0, "fail": 0}
    t0 = time.monotonic()
    for path, name, blocks in parsed:
        if blocks:
            run_file(path, name, blocks, args, repo, counts)
    total = counts["ok"] + counts["skip"] + counts["fail"]
    print(f"{total} commands: {counts['ok']} ok, {counts['skip']} skipped, {counts['fail']} failed "
          f"({time.monotonic() - t0:.1f} s)")
    return 1 if counts["fail"] else 0


if __name__ == "__main__":
    sys.exit(main())
