"""experiments/device_check.py --tiny: the prepared accelerator check, run on this CPU.

It writes one JSON: splash attention (interpret mode here) against xla with outputs and
gradients within bf16 rounding, the pre-training and fine-tuning steps timed with their
figures. And it runs without the packages an accelerator image lacks (grain, TFDS,
array_record, ml_collections, tensorboardX, gensim, matplotlib): the script is started with
those imports refused.
"""

import json
import math
import os
import subprocess
import sys

from repo_root import ROOT

MISSING_ON_THE_IMAGE = ("grain", "tensorflow_datasets", "array_record", "ml_collections",
                        "tensorboardX", "gensim", "matplotlib")

# Refuse the packages, then run the script as __main__ (what `python script.py` does).
LAUNCH = """
import importlib.abc, runpy, sys
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {missing!r}:
            raise ImportError(f"{{name}} is not on this image")
sys.meta_path.insert(0, Refuse())
sys.argv = [{script!r}] + sys.argv[1:]
runpy.run_path({script!r}, run_name="__main__")
"""


def test_device_check_tiny_on_cpu_without_the_data_packages(tmp_path):
    out = tmp_path / "check.json"
    script = os.path.join(ROOT, "experiments", "device_check.py")
    code = LAUNCH.format(missing=MISSING_ON_THE_IMAGE, script=script)
    done = subprocess.run([sys.executable, "-c", code, "--tiny", "--steps=2", f"--json={out}"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["device"]["platform"] == "cpu" and report["size"] == "tiny"
    attention = report["attention"]
    assert attention["kernel"] == "splash"
    for rows in ("padded", "packed"):
        result = attention[rows]
        assert result["auto_chooses"] == "xla"  # on CPU, auto is the reference
        for key in ("output", "grad_q", "grad_k", "grad_v"):
            assert result[f"{key}_max_abs_diff"] < 2e-2, (rows, key, result)
    for section, rate in (("pretrain", "tokens_per_s"), ("finetune", "examples_per_s")):
        (figures,) = report[section].values()
        assert figures[rate] > 0 and figures["compile_and_first_step_s"] > 0
        assert len(figures["step_s_all"]) == 2
        assert 0 < figures["mfu"] and math.isfinite(figures["mfu"])


def test_device_check_bad_input_is_one_line(tmp_path):
    done = subprocess.run([sys.executable, os.path.join(ROOT, "experiments", "device_check.py"),
                           "--tiny", "--steps=0", f"--json={tmp_path / 'x.json'}"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == \
        "device_check.py: error: --steps=0 must be positive"
