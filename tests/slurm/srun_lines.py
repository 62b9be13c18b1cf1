#!/usr/bin/python3
"""How `srun --label` delivers concurrent lines of its tasks (tests/slurm/README.md).

  srun_lines.py write SIZE COUNT [SIZE COUNT ...]   (a task) COUNT JSON lines of exactly SIZE
                                                    bytes (newline included), each one write()
  srun_lines.py check FILE TASKS SIZE COUNT ...     (the reader) parse FILE, srun's stdout, and
                                                    count what happened to the lines
  srun_lines.py run DIR [SIZE COUNT ...]            submit `sbatch -N3` jobs that run the
                                                    writers through `srun --overlap --label` with
                                                    and without --unbuffered, print what came
                                                    out; exit 1 unless it is as the README says

`run` loads the cluster's client environment from DIR/env.
"""
import json
import os
import re
import subprocess
import sys
import time


def write(args):
    task = int(os.environ.get("SLURM_PROCID", "0"))
    pairs = [(int(args[i]), int(args[i + 1])) for i in range(0, len(args), 2)]
    seq = 0
    for size, count in pairs:
        for _ in range(count):
            head = '{"task": %d, "seq": %d, "size": %d, "pad": "' % (task, seq, size)
            tail = '"}\n'
            pad = size - len(head) - len(tail)
            if pad < 0:
                sys.exit(f"size {size} too small")
            line = (head + "x" * pad + tail).encode()
            assert len(line) == size
            n = os.write(1, line)
            if n != size:
                sys.exit(f"task {task}: write() of {size} bytes wrote {n}")
            seq += 1


LABEL = re.compile(rb"^ *(\d+): ")


def check(path, tasks, pairs):
    """What srun made of the lines: (stats, examples). A piece is one output line, label
    stripped; `whole` pieces are a complete line of a task; the others are fragments. `rejoined`
    counts the lines recovered by joining, per label, consecutive pieces until they parse as JSON;
    `rejoined_1024` those recovered by the rule `a piece of exactly 1024 bytes continues`."""
    data = open(path, "rb").read()
    expected = set()
    seq = 0
    for _, count in pairs:
        for _ in range(count):
            for t in range(tasks):
                expected.add((t, seq))
            seq += 1
    pieces = data.split(b"\n")
    if pieces and pieces[-1] == b"":
        pieces.pop()
    stats = {"bytes": len(data), "pieces": len(pieces), "whole": 0, "fragments": 0,
             "empty": 0, "longest": 0, "cr": data.count(b"\r"), "unlabelled": 0,
             "mixed": 0, "rejoined": 0, "rejoined_1024": 0, "lost": 0, "duplicates": 0}
    examples = []
    seen = set()
    pending = {}  # label -> bytes joined so far (JSON rule)
    pending_1024 = {}  # label -> bytes joined so far (1024 rule)
    seen_1024 = set()

    def parse(payload):
        try:
            obj = json.loads(payload)
            return (obj["task"], obj["seq"]) if len(payload) + 1 == obj["size"] else None
        except (ValueError, KeyError, TypeError):
            return None

    for raw in pieces:
        m = LABEL.match(raw)
        if not m:
            stats["unlabelled"] += 1
            if len(examples) < 5:
                examples.append(f"unlabelled: {raw[:40]!r}")
            continue
        label = int(m.group(1))
        payload = raw[m.end():]
        stats["longest"] = max(stats["longest"], len(payload))
        key = parse(payload)
        if key:
            stats["whole"] += 1
        elif payload:
            stats["fragments"] += 1
            if len(examples) < 3:
                examples.append(f"label {label}: a piece of {len(payload)} B: "
                                f"{payload[:28]!r}...{payload[-12:]!r}")
        else:
            stats["empty"] += 1
        joined = pending.get(label, b"") + payload
        key = parse(joined) if joined.endswith(b"}") else None
        if key:
            if key[0] != label:
                stats["mixed"] += 1  # a line of another task under this label
            if key in seen:
                stats["duplicates"] += 1
            seen.add(key)
            pending[label] = b""
        else:
            pending[label] = joined
        joined = pending_1024.get(label, b"") + payload
        if len(payload) == 1024:
            pending_1024[label] = joined
        else:
            key = parse(joined)
            if key:
                seen_1024.add(key)
            pending_1024[label] = b""
    stats["rejoined"] = len(seen & expected)
    stats["rejoined_1024"] = len(seen_1024 & expected)
    stats["lost"] = len(expected - seen)
    return stats, examples


def run(cluster_dir, pairs):
    """Runs the writers through srun with and without --unbuffered, prints what came out, and
    checks what tests/slurm/README.md says: every piece is labelled and holds bytes of one task only;
    nothing is lost or duplicated; joining a label's pieces until they parse as JSON recovers every
    line; without --unbuffered, lines up to 1024 bytes (newline included) arrive whole and longer
    ones in pieces of exactly 1024 bytes."""
    here = os.path.abspath(__file__)
    ok = True
    # One job runs every case, one srun after the other (a job per case costs seconds of
    # scheduling each).
    cases = []
    script = "#!/bin/sh\n"
    for size, count in pairs:
        for unbuffered in (True, False):
            flags = "--label --unbuffered" if unbuffered else "--label"
            out = os.path.join(cluster_dir, f"srun-lines-{size}{'-u' if unbuffered else ''}.out")
            cases.append((size, count, unbuffered, flags, out))
            script += (f"srun --overlap --nodes=3 --ntasks-per-node=1 {flags} "
                       f"/usr/bin/python3 {here} write {size} {count} > {out}\n")
    log = os.path.join(cluster_dir, "srun-lines.log")
    jid = subprocess.run(["sbatch", "--parsable", "-N3", "-o", log], input=script, text=True,
                         capture_output=True, check=True).stdout.strip()
    state = "?"
    deadline = time.time() + 120
    while time.time() < deadline:
        m = re.search(r"JobState=(\w+)", subprocess.run(
            ["scontrol", "show", "job", jid], capture_output=True, text=True).stdout)
        state = m.group(1) if m else "?"
        if state not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING"):
            break
        time.sleep(0.2)
    if state != "COMPLETED":
        print(f"FAIL: job {jid}: {state}; see {log}")
        return False
    for size, count, unbuffered, flags, out in cases:
        stats, examples = check(out, 3, [(size, count)])
        lines = 3 * count
        bad = []
        if stats["unlabelled"] or stats["mixed"] or stats["cr"]:
            bad.append("unlabelled, mixed or CR pieces")
        if stats["lost"] or stats["duplicates"] or stats["rejoined"] != lines:
            bad.append("lines lost, duplicated or not recovered by joining")
        if not unbuffered and size <= 1024 and stats["whole"] != lines:
            bad.append("buffered lines <= 1024 B not whole")
        if not unbuffered and stats["longest"] > 1024:
            bad.append("buffered piece > 1024 B")
        if not unbuffered and stats["rejoined_1024"] != lines:
            bad.append("buffered lines not recovered by the 1024 rule")
        ok &= not bad
        print(f"{'FAIL' if bad else 'ok'}: srun --overlap {flags}, 3 tasks x {count} lines "
              f"of {size} B: " + " ".join(f"{k}={v}" for k, v in stats.items())
              + (f" [{'; '.join(bad)}]" if bad else ""))
        for e in examples:
            print("    " + e)
    return ok


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "write":
        write(sys.argv[2:])
    elif len(sys.argv) >= 4 and sys.argv[1] == "check":
        a = sys.argv[4:]
        stats, examples = check(sys.argv[2], int(sys.argv[3]),
                                [(int(a[i]), int(a[i + 1])) for i in range(0, len(a), 2)])
        print(" ".join(f"{k}={v}" for k, v in stats.items()))
        print("\n".join(examples))
    elif len(sys.argv) >= 3 and sys.argv[1] == "run":
        env = os.path.join(sys.argv[2], "env")  # the cluster's client environment
        if not os.path.exists(env):
            sys.exit(f"FAIL: {env} missing: the cluster is not up (fixture slurm_cluster)")
        for line in open(env):
            m = re.match(r"export (\w+)=(.*)$", line.strip())
            if m:
                os.environ[m.group(1)] = m.group(2)
        a = sys.argv[3:] or ["100", "1000", "1024", "300", "1025", "300", "8192", "100", "65536", "20"]
        sys.exit(0 if run(sys.argv[2], [(int(a[i]), int(a[i + 1])) for i in range(0, len(a), 2)])
                 else 1)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
