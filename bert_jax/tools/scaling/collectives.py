"""The collectives of a compiled program, per device and per execution, from its HLO text.

For every all-reduce, all-gather, reduce-scatter, all-to-all and collective-permute (and their
asynchronous `-start` forms; a `-done` moves nothing more): the bytes one device puts in and gets
out, its device groups, how often it runs per step (loop trip counts; see `hlo`), and three facts
about the values around it, which say what a GPU or TPU compiler would make of the same program:

- `source`: the entry argument it moves, up to layout changes (a parameter all-gather reads
  "state.params[...]"; "" for a computed value such as an activation);
- `sliced_bytes` (all-reduce): the bytes of the results whose every use keeps 1/n of them through
  a dynamic-slice, i.e. a reduce-scatter written as all-reduce + slice. XLA's GPU and TPU
  pipelines rewrite that pattern into a reduce-scatter (ReduceScatterCreator); XLA:CPU keeps it;
- `reassociable_bytes` (all-reduce): the bytes of results that are added, right after, to another
  all-reduced value over the same groups (add(all-reduce(a), all-reduce(b)): one all-reduce of
  a + b would do; XLA's AllReduceReassociate does this on GPU). In BERT the tied word embedding
  gets two gradient contributions, the lookup's and the MLM decoder's.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

from bert_jax.tools.scaling import hlo
from bert_jax.tools.scaling.groups import Groups, parse_groups

KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")
# XLA:TPU writes a reduce-scatter as a custom fusion of all-reduce + dynamic-slice (its
# computation named so) that one emitter runs as a reduce-scatter: counted as one.
REDUCE_SCATTER_FUSION = "all-reduce-scatter"


@dataclasses.dataclass(frozen=True)
class Collective:
    """One collective instruction (per-device bytes of one execution)."""

    name: str
    kind: str  # one of KINDS
    computation: str
    executions: int  # runs per step (loop trip counts multiplied)
    operand_bytes: float  # what one device puts in
    result_bytes: float  # what one device gets out
    dtypes: tuple[str, ...]
    groups: Groups  # partition ids; collective-permute: (source, target) pairs
    op_name: str = ""  # the jax operation it came from
    source: str = ""  # the entry argument it moves ("" for a computed value)
    sliced_bytes: float = 0.0  # all-reduce results only used as 1/n slices
    reassociable_bytes: float = 0.0  # all-reduce results added to another all-reduced value

    @property
    def group_size(self) -> int:
        return 2 if self.kind == "collective-permute" else len(self.groups[0])

    @property
    def moves_data(self) -> bool:
        """False for groups of one device and permutes that send every buffer to itself."""
        if self.kind == "collective-permute":
            return any(source != target for source, target in self.groups)
        return self.group_size > 1


def collectives(text: str, num_devices: int) -> tuple[list[Collective], hlo.HloModule]:
    """Every collective of an HLO text (see the module docstring), and the parsed module.

    XLA:TPU splits one asynchronous collective into a chain of "continuation" fusions, each
    holding the whole collective instruction and passing its in-flight buffers on to the next
    (`continuation_config`, operands aliased to outputs), so that the transfer overlaps the
    computation fused beside it. A chain moves its bytes once: only its first fusion's
    collective is counted."""
    module = hlo.parse_module(text)
    runs = hlo.executions_per_computation(module)
    reassociable = _reassociable_bytes(module, num_devices)
    continued = _continuation_computations(module)
    found = []
    for computation, instruction in hlo.iter_instructions(module):
        kind = instruction.opcode.removesuffix("-start")
        if kind not in KINDS or runs[computation] == 0 or computation in continued:
            continue
        groups = parse_groups(instruction.attributes, num_devices)
        n = 2 if kind == "collective-permute" else len(groups[0])
        operand_bytes = sum(hlo.array_bytes(module.instructions[o].shape)
                            for o in instruction.operands if o in module.instructions)
        if instruction.opcode.endswith("-start"):
            result_bytes = {"all-gather": operand_bytes * n}.get(kind, operand_bytes)
        else:
            result_bytes = hlo.array_bytes(instruction.shape)
        if kind == "all-reduce" and computation.startswith(REDUCE_SCATTER_FUSION):
            kind, result_bytes = "reduce-scatter", operand_bytes / n
        found.append(Collective(
            instruction.name, kind, computation, runs[computation], operand_bytes, result_bytes,
            tuple(sorted({d for d, _ in hlo.arrays(instruction.shape)})), groups,
            instruction.op_name,
            source=(hlo.entry_argument(module, instruction.operands[0])
                    if len(instruction.operands) == 1 else ""),
            sliced_bytes=_sliced_bytes(module, instruction, n) if kind == "all-reduce" else 0.0,
            reassociable_bytes=reassociable.get(instruction.name, 0.0)))
    return found, module


def _continuation_computations(module: hlo.HloModule) -> set[str]:
    """The computations of continuation fusions that carry on a collective begun by another
    fusion (see `collectives`): those whose operands, through tuple elements and bitcasts, are
    another continuation fusion's outputs."""
    fusions = {ins.name: ins for _, ins in hlo.iter_instructions(module)
               if ins.opcode == "fusion" and "continuation_config" in ins.attributes}

    def producer(name: str) -> str:
        instruction = module.instructions.get(name)
        while instruction is not None and instruction.opcode in ("get-tuple-element", "bitcast") \
                and instruction.operands:
            instruction = module.instructions.get(instruction.operands[0])
        return instruction.name if instruction is not None else name

    continued = set()
    for fusion in fusions.values():
        if any(producer(o) in fusions for o in fusion.operands):
            continued.update(hlo.called_computations(fusion))
    return continued


def _elements(instruction: hlo.Instruction) -> dict[Optional[int], tuple[str, tuple[int, ...]]]:
    """Result arrays by tuple index (None for a single array)."""
    arrays = hlo.arrays(instruction.shape)
    return dict(enumerate(arrays)) if instruction.shape.startswith("(") else {None: arrays[0]}


def _sliced_bytes(module: hlo.HloModule, all_reduce: hlo.Instruction, n: int) -> float:
    """Bytes of the results whose every use is a dynamic-slice keeping 1/n of the elements
    (directly, or as the first use of it inside a fusion, after layout changes)."""
    elements = _elements(all_reduce)
    total = 0.0
    for index, names in hlo.element_values(module, all_reduce.name).items():
        if index not in elements:
            continue
        dtype, dims = elements[index]
        uses = [(name, user) for name in names for user in module.users.get(name, [])]
        if uses and all(_keeps_one_nth(module, name, user, math.prod(dims), n)
                        for name, user in uses):
            total += hlo.array_bytes(f"{dtype}[{','.join(map(str, dims))}]")
    return total


def _keeps_one_nth(module: hlo.HloModule, value: str, user: hlo.Instruction, count: int,
                   n: int, depth: int = 0) -> bool:
    """Whether `user` reads only a 1/n dynamic-slice of `value` (count elements)."""
    if user.opcode == "dynamic-slice":
        out = hlo.arrays(user.shape)
        return user.operands[0] == value and len(out) == 1 and n * math.prod(out[0][1]) == count
    if user.opcode in ("bitcast", "convert", "copy", "reshape") and depth < 4:
        uses = module.users.get(user.name, [])
        return bool(uses) and all(_keeps_one_nth(module, user.name, u, count, n, depth + 1)
                                  for u in uses)
    if user.opcode != "fusion" or depth >= 4:
        return False
    body = module.computations.get((user.attribute("calls") or "").lstrip("%"), [])
    positions = {i for i, operand in enumerate(user.operands) if operand == value}
    inner = [i for i in body if i.opcode == "parameter" and int(i.arguments) in positions]
    return bool(inner) and all(
        module.users.get(p.name) and all(_keeps_one_nth(module, p.name, u, count, n, depth + 1)
                                         for u in module.users[p.name]) for p in inner)


def _reassociable_bytes(module: hlo.HloModule, num_devices: int) -> dict[str, float]:
    """{all-reduce name: bytes of its results that are added to another all-reduced value over
    the same groups} (the first operand of each such add is kept, the others counted)."""
    produced: dict[str, tuple[hlo.Instruction, Optional[int]]] = {}
    for _, instruction in hlo.iter_instructions(module):
        if instruction.opcode.removesuffix("-start") != "all-reduce":
            continue
        produced[instruction.name] = (instruction, None)
        for user in module.users.get(instruction.name, []):
            if user.opcode == "get-tuple-element":
                produced[user.name] = (instruction, int(user.attribute("index")))
    counted: dict[str, float] = {}
    for _, adder in hlo.iter_instructions(module):
        if not _is_add(module, adder):
            continue
        seen: set[Groups] = set()
        for operand in adder.operands:
            if operand not in produced:
                continue
            all_reduce, index = produced[operand]
            groups = parse_groups(all_reduce.attributes, num_devices)
            if groups in seen:
                dtype, dims = _elements(all_reduce)[index]
                counted[all_reduce.name] = counted.get(all_reduce.name, 0.0) + hlo.array_bytes(
                    f"{dtype}[{','.join(map(str, dims))}]")
            seen.add(groups)
    return counted


def _is_add(module: hlo.HloModule, instruction: hlo.Instruction) -> bool:
    """An add, or a fusion that is one add of its parameters (up to layout changes)."""
    if instruction.opcode == "add":
        return True
    if instruction.opcode != "fusion":
        return False
    body = module.computations.get((instruction.attribute("calls") or "").lstrip("%"), [])
    opcodes = [i.opcode for i in body if i.opcode not in hlo.LAYOUT_OPCODES]
    return opcodes == ["add"]
