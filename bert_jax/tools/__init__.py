"""Tools above the recipes, for finished runs and reports: saved_runs.py (a run's tokenizer and
the encoder of a run or a Hugging Face folder), evaluation.py (a saved run evaluated, whatever
its recipe: experiments/evaluate.py), convert_runs.py (whole runs to and from Hugging
Face folders), plotting.py (curves of runs into a PNG), scaling/ (the scaling report: the
compiled step on N devices, read).

Import the submodules directly (`from bert_jax.tools import saved_runs`); this package imports
none of them.
"""
