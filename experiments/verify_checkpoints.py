"""Verify a run's checkpoints without training it or building its model.

    python experiments/verify_checkpoints.py --workdir=/tmp/bert_demo

Checks every step folder in `<workdir>/checkpoints` (or the checkpoints folder itself, if given):
its files against the checksums recorded when it was saved, and that its metadata, its arrays'
metadata and its data-iterator states can be read (bert_jax.train.checkpoint.verification).
Prints one line per step, oldest first: `<dir>/<step>: ok (...)`, `... damaged: <the file at
fault and what is wrong>`, or `... readable, not verified (...)` for a step saved before
checksums were recorded. A local folder or a gs:// workdir.

Exit status: 0 when no step is damaged; 1 with one line `verify_checkpoints.py: error: ...`
naming the damaged steps (a training run resumes from the newest intact one and sets the newer
ones aside), or naming what is wrong with --workdir.
"""

from absl import app, flags

from bert_jax import cli
from bert_jax.runtime import distributed
from bert_jax.train.checkpoint import verification as checkpoint_verification

FLAGS = flags.FLAGS
SCRIPT = "verify_checkpoints.py"


def main(argv):
    cli.start(argv)
    checks = cli.run_or_exit(SCRIPT, lambda: checkpoint_verification.check_run(FLAGS.workdir))
    for check in checks:
        print(checkpoint_verification.describe(check), flush=True)
    damaged = [check.step for check in checks if check.problem is not None]
    if damaged:
        raise SystemExit(f"{SCRIPT}: error: {len(damaged)} of {len(checks)} checkpoint steps "
                         f"are damaged: {damaged}")


if __name__ == "__main__":
    flags.DEFINE_string("workdir", None, "The workdir of a training run (or its checkpoints "
                        "folder).", required=True)
    distributed.define_flags()
    app.run(main, flags_parser=cli.parse_flags)
