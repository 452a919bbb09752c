r"""A preparation killed half-way and run again: the same bytes as an uninterrupted run?

  python benchmarks/prepare_resume.py --corpus='text:/data/corpus_1000mb/txt/*.txt.zst' \
      --tokenizer=/data/wordpiece --workdir=/tmp/prepare_resume --workers=2

Runs experiments/prepare_shards.py three times, each in its own process group:
  1. uninterrupted, into WORKDIR/reference;
  2. into WORKDIR/killed, sent SIGTERM (the whole process group: the workers too, as a
     scheduler's or a terminal's signal reaches them) once half of the plan's work units are
     recorded as done;
  3. the same command as 2 again.
Then compares every file of the two folders (shards, token counts, tokenizer, manifest) byte for
byte, and prints one JSON line: the seconds of each run, the units done at the kill, the files
compared and whether all are identical, the leftovers (.tmp-* files) in the killed folder before
the rerun and after it.
"""

from __future__ import annotations

import argparse
import filecmp
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def command(args, output_dir: str) -> list[str]:
    return [sys.executable, os.path.join(ROOT, "experiments", "prepare_shards.py"),
            f"--corpus={args.corpus}", f"--tokenizer={args.tokenizer}",
            f"--output_dir={output_dir}", f"--workers={args.workers}"]


def run(args, output_dir: str) -> float:
    started = time.perf_counter()
    subprocess.run(command(args, output_dir), check=True, cwd=ROOT, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def killed_at_half(args, output_dir: str) -> tuple[float, int, int]:
    """(seconds until the kill, units done then, units planned)."""
    started = time.perf_counter()
    process = subprocess.Popen(command(args, output_dir), cwd=ROOT, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    plan = os.path.join(output_dir, "plan.json")
    units, done = None, 0
    while process.poll() is None:
        if units is None and os.path.exists(plan):
            units = len(json.load(open(plan))["units"])
        done = len(glob.glob(os.path.join(output_dir, ".units", "unit-*.json")))
        if units and done >= units / 2:
            os.killpg(process.pid, signal.SIGTERM)
            break
        time.sleep(0.05)
    process.wait()
    if units is None or done < units / 2:
        raise SystemExit(f"the run ended (exit {process.returncode}) before half its units were "
                         "done: give a larger corpus")
    return time.perf_counter() - started, done, units


def files(folder: str) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), folder)
                  for d, _, names in os.walk(folder) for f in names)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--workdir", default="/tmp/prepare_resume")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    reference, killed = (os.path.join(args.workdir, name) for name in ("reference", "killed"))
    for folder in (reference, killed):
        shutil.rmtree(folder, ignore_errors=True)
    result = {"corpus": args.corpus, "workers": args.workers,
              "uninterrupted_s": round(run(args, reference), 1)}
    seconds, done, units = killed_at_half(args, killed)
    result.update(killed_after_s=round(seconds, 1), units_done_at_kill=done, units=units,
                  leftovers_after_kill=[f for f in files(killed) if ".tmp-" in f])
    result["rerun_s"] = round(run(args, killed), 1)
    names = [f for f in files(reference) if not f.startswith(".units")]
    result.update(
        leftovers_after_rerun=[f for f in files(killed) if ".tmp-" in f],
        files_compared=len(names), same_file_names=names == [
            f for f in files(killed) if not f.startswith(".units")],
        identical=all(filecmp.cmp(os.path.join(reference, n), os.path.join(killed, n),
                                  shallow=False) for n in names))
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
