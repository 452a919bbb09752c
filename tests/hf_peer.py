"""The parity tests' peer, transformers, at either end of the tested range: 4.57 (the floor
stack, the last release with Flax classes) and 5.x (the newest stack). What moved between them is
named here once.

- transformers 4.x compiles ModernBERT's torch model with torch.compile unless a config says
  `reference_compile=False`; 5 has no such setting and refuses the keyword in `from_pretrained`.
- transformers 5 has one tokenizer class per model, backed by the `tokenizers` library (the
  "...Fast" names are aliases), and a model's own class rebuilds its pipeline from the vocabulary
  and the class's defaults, keeping only the post-processor of a tokenizer.json;
  `PreTrainedTokenizerFast` (5: `TokenizersBackend`) takes a tokenizer.json as it is in both.
"""

import transformers

MAJOR = int(transformers.__version__.split(".")[0])
# Keywords for a ModernBERT config or from_pretrained that keep transformers' reference eager.
EAGER_MODERNBERT = {"reference_compile": False} if MAJOR < 5 else {}


def fast_tokenizer_name(model_class: str) -> str:
    """The class name that AutoTokenizer gives for a model's tokenizer class: e.g.
    'BertTokenizerFast' in 4.x, 'BertTokenizer' in 5."""
    return f"{model_class}Fast" if MAJOR < 5 else model_class
