"""The real text pairs of bert_jax/data/finetuning/docstring_pairs.py: splits disjoint by module
and by text, every pair kept, the files written once."""

import json
import sys

from bert_jax.data.finetuning import docstring_pairs


def test_the_split_keeps_every_pair_and_shares_no_module_or_text(tmp_path):
    summary = docstring_pairs.prepare(str(tmp_path))
    rows = {name: [json.loads(line) for line in (tmp_path / f"{name}.jsonl").open()]
            for name in ("train", "test")}
    assert len(rows["train"]) + len(rows["test"]) == summary["pairs"] > 1000
    assert {name: len(r) for name, r in rows.items()} == {
        "train": summary["train"], "test": summary["test"]}
    for key in ("module", "positive"):  # summary lines may repeat ("Return the value.")
        assert not {r[key] for r in rows["train"]} & {r[key] for r in rows["test"]}, key
    assert summary["test_modules"] == summary["modules"] // 5
    assert summary["python"] == sys.version.split()[0]
    assert all(len(r["anchor"]) >= 20 and len(r["positive"]) >= 80 for r in rows["test"])
    # prepared once: a second call reads the summary back instead of writing again
    (tmp_path / "test.jsonl").write_text("kept\n")
    assert docstring_pairs.prepare(str(tmp_path)) == summary
    assert (tmp_path / "test.jsonl").read_text() == "kept\n"
