"""Converters between our parameter trees and other checkpoint formats (`hf`: Hugging Face BERT)."""

from bert_jax.convert import hf

__all__ = ["hf"]
