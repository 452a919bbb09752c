"""Dropout's random bits from a counter hash: the "hash" PRNG implementation of
`config.dropout_rng` (bert_jax.config.settings.DROPOUT_RNGS).

    key = jax.random.wrap_key_data(uint32[2] data, impl=hash_impl())
    nn.Dropout(rate)(x, deterministic=False, rng=key)     # flax draws from it as from any key

A key is two uint32 words (k0, k1). The bits of an array of shape S are, element by element,

    bits[i] = fmix32(fmix32(i * 0x9E3779B9 + k0) ^ k1)

where i is the element's position in S in row-major order (modulo 2^32) and fmix32 is
MurmurHash3's 32-bit finaliser (a bijection of uint32 that mixes every input bit into every output
bit). fold_in(key, d) and split(key) hash the key's words with d (or with the new keys' numbers)
the same way. Why not threefry (JAX's default): threefry2x32 takes 20 rounds for every 64 bits
and, on CPU, compiles to a rolled loop per draw, two per dropout site (the site's fold_in and its
bits), so that dropout alone was a third of a small BERT step's compilation (1.5 of 4.5-5.4 s)
and 5-10% of its run (docs/history.md). The hash is a dozen integer operations per 32 bits with
no loop: it fuses into the select that applies the mask, and its compilation is that of one
elementwise expression.

Contracts:
- The same key gives the same bits in any program, on any mesh and any backend: i is the
  element's position in the whole (global) array, so a shard computes exactly its slice.
- Bits are uniform for dropout's purpose: each is a bijective hash of a distinct counter, so no
  value repeats within 2^32 elements of one draw; a larger draw would repeat its bits every 2^32
  elements (no dropout site comes near). This is not a generator for cryptography or for
  sampling that needs threefry's statistical guarantees; it draws only dropout masks here
  (parameter initialisation stays threefry).
"""

from __future__ import annotations

import functools
from typing import Sequence

import jax.numpy as jnp
import numpy as np
from jax import lax

_GOLDEN = np.uint32(0x9E3779B9)  # 2^32 / golden ratio: spreads consecutive counters
_FOLD_SALT = np.uint32(0x2545F491)
_SPLIT_SALT = np.uint32(0x51ED270B)


def _fmix32(x):
    """MurmurHash3's finaliser: a bijection of uint32 with full avalanche."""
    x = x ^ (x >> 16)
    x = x * np.uint32(0x85EBCA6B)
    x = x ^ (x >> 13)
    x = x * np.uint32(0xC2B2AE35)
    return x ^ (x >> 16)


def _hash(k0, k1, counter):
    return _fmix32(_fmix32(counter * _GOLDEN + k0) ^ k1)


def _positions(shape: Sequence[int]):
    """uint32 array of `shape`: each element's row-major position (modulo 2^32)."""
    shape = tuple(shape)
    position = jnp.zeros(shape, jnp.uint32)
    stride = 1
    for axis in reversed(range(len(shape))):
        position = position + (lax.broadcasted_iota(jnp.uint32, shape, axis)
                               * np.uint32(stride % (1 << 32)))
        stride *= shape[axis]
    return position


def _seed(seed):
    seed = jnp.asarray(seed)
    high = (jnp.right_shift(seed, 32) if seed.dtype.itemsize == 8 else jnp.zeros_like(seed))
    return jnp.stack([lax.convert_element_type(high, jnp.uint32),
                      lax.convert_element_type(seed, jnp.uint32)])


def _split(key, shape):
    count = int(np.prod(shape))
    words = _hash(key[0], key[1], lax.iota(jnp.uint32, 2 * count) + _SPLIT_SALT)
    return words.reshape(*shape, 2)


def _fold_in(key, data):
    data = lax.convert_element_type(data, jnp.uint32) * np.uint32(2) + _FOLD_SALT
    return jnp.stack([_hash(key[0], key[1], data), _hash(key[1], key[0], data + np.uint32(1))])


def _random_bits(key, bit_width, shape):
    positions = _positions(shape)
    low = _hash(key[0], key[1], positions)
    if bit_width == 32:
        return low
    if bit_width in (8, 16):
        return lax.convert_element_type(low, jnp.dtype(f"uint{bit_width}"))
    high = _hash(key[1], key[0], positions)  # 64 bits: a second word, the key's words swapped
    return ((lax.convert_element_type(high, jnp.uint64) << np.uint64(32))
            | lax.convert_element_type(low, jnp.uint64))


@functools.cache
def hash_impl():
    """The PRNG implementation (jax.extend.random.define_prng_impl), made once."""
    from jax.extend import random as jex_random
    return jex_random.define_prng_impl(key_shape=(2,), seed=_seed, split=_split,
                                       random_bits=_random_bits, fold_in=_fold_in,
                                       name="bert_jax_hash", tag="hsh")
