"""A reader of XLA's HLO text (`compiled.as_text()`): computations, instructions, shapes, how
often each computation runs per execution of the program, and where a value comes from.

Only what the scaling report needs is read: every instruction's name, result shape, opcode,
operands and attributes; the entry computation; the call graph (while bodies and conditions,
calls, fusions, conditional branches, async wrappers) with the trip count of each while loop
(XLA's `known_trip_count`, else the one integer bound of its condition).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from typing import Iterator, Optional

# Bytes per element by HLO primitive type (sub-byte types count their packed size).
_ITEMSIZE = {"pred": 1, "s4": 0.5, "u4": 0.5, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2,
             "bf16": 2, "s32": 4, "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8,
             "c128": 16}
_ARRAY = re.compile(r"\b([a-z][a-z0-9]*)\[([0-9,<=]*)\]")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*)$")
_HEADER = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s*\(.*->.*\{\s*$")
_CALLEE = re.compile(r"\b(condition|body|to_apply|calls|true_computation|false_computation)"
                     r"=%?([\w.\-]+)")
_CALLEE_LISTS = re.compile(r"\b(branch_computations|called_computations)=\{([^}]*)\}")
_TRIP_COUNT = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')
# Opcodes that only move or retype one operand's elements: a value keeps its origin through them.
LAYOUT_OPCODES = frozenset({"bitcast", "copy", "transpose", "reshape", "convert", "parameter"})
# Opcodes that take a part of their first operand (a layer of a stacked, scanned parameter).
SLICE_OPCODES = frozenset({"slice", "dynamic-slice"})


class HloParseError(ValueError):
    """The HLO text holds a construct this reader does not know (named in the message)."""


@dataclasses.dataclass(frozen=True)
class Instruction:
    name: str
    shape: str  # the result shape as printed, e.g. "f32[8,128]{1,0}" or a tuple "(...)"
    opcode: str
    operands: tuple[str, ...]  # operand instruction names
    arguments: str  # the text between the opcode's parentheses (a constant's literal)
    attributes: str  # everything after the operand list

    def attribute(self, key: str) -> Optional[str]:
        """The value of `key=value` among the attributes (up to the next comma), or None."""
        match = re.search(rf"\b{key}=([^,]*)", self.attributes)
        return match.group(1) if match else None

    @property
    def op_name(self) -> str:
        """The jax operation (or, for an entry parameter, the argument path) it came from."""
        match = re.search(r'op_name="([^"]*)"', self.attributes)
        return match.group(1).replace("\\'", "'") if match else ""


@dataclasses.dataclass
class HloModule:
    """One HLO module. Instruction names are unique across the module."""

    computations: dict[str, list[Instruction]]
    entry: str
    unknown_trip_counts: list[str] = dataclasses.field(default_factory=list)  # while names

    def __post_init__(self):
        self.instructions = {i.name: i for c in self.computations.values() for i in c}
        self.owner = {i.name: c for c, body in self.computations.items() for i in body}
        self.users: dict[str, list[Instruction]] = {}
        self.call_sites: dict[str, list[Instruction]] = {}
        for instruction in self.instructions.values():
            for operand in set(instruction.operands):
                self.users.setdefault(operand, []).append(instruction)
            for callee in called_computations(instruction):
                self.call_sites.setdefault(callee, []).append(instruction)


# ----- shapes ----------------------------------------------------------------------------------

def array_bytes(shape: str) -> float:
    """Bytes of every array in a printed shape (a tuple's elements added; tokens count 0)."""
    return sum(_ITEMSIZE[dtype] * math.prod(dims) for dtype, dims in arrays(shape))


def arrays(shape: str) -> list[tuple[str, tuple[int, ...]]]:
    """(dtype, dims) of every array in a printed shape, in order (tuples flattened)."""
    found = []
    for dtype, dims in _ARRAY.findall(re.sub(r"\{[^{}]*\}", "", shape)):
        if dtype in _ITEMSIZE:
            found.append((dtype, tuple(int(d.replace("<=", "")) for d in dims.split(",") if d)))
    return found


# ----- parsing ---------------------------------------------------------------------------------

def parse_module(text: str) -> HloModule:
    """The computations (name -> instructions, in order) and the entry of an HLO text."""
    computations: dict[str, list[Instruction]] = {}
    entry, current = None, None
    for raw in text.splitlines():
        line = re.sub(r"/\*.*?\*/", "", raw).rstrip()
        header = _HEADER.match(line) if current is None else None
        if header:
            current = header.group(2)
            computations[current] = []
            entry = current if header.group(1) else entry
        elif line.strip() == "}":
            current = None
        elif current is not None:
            instruction = _parse_instruction(line)
            if instruction is not None:
                computations[current].append(instruction)
    if entry is None:
        raise HloParseError("no ENTRY computation in the HLO text")
    return HloModule(computations, entry)


def _parse_instruction(line: str) -> Optional[Instruction]:
    match = _INSTRUCTION.match(line)
    if not match:
        return None
    name, rest = match.groups()
    if rest.startswith("("):
        end = closing(rest, 0, "()")
        shape, rest = rest[:end + 1], rest[end + 1:].lstrip()
    else:
        shape, _, rest = rest.partition(" ")
    opcode = re.match(r"([\w\-]+)\(", rest)
    if not opcode:
        return None
    open_at = opcode.end() - 1
    close_at = closing(rest, open_at, "()")
    arguments = rest[open_at + 1:close_at]
    return Instruction(name, shape, opcode.group(1), tuple(re.findall(r"%([\w.\-]+)", arguments)),
                       arguments, rest[close_at + 1:])


def closing(text: str, open_at: int, pair: str) -> int:
    """Index of the bracket (pair = "()" or "{}") that closes the one at `open_at`."""
    depth = 0
    for i in range(open_at, len(text)):
        depth += {pair[0]: 1, pair[1]: -1}.get(text[i], 0)
        if depth == 0:
            return i
    raise HloParseError(f"unbalanced {pair} in {text[:120]!r}")


# ----- the call graph --------------------------------------------------------------------------

def called_computations(instruction: Instruction) -> list[str]:
    names = [callee for _, callee in _CALLEE.findall(instruction.attributes)]
    for _, listed in _CALLEE_LISTS.findall(instruction.attributes):
        names.extend(re.findall(r"%?([\w.\-]+)", listed))
    return names


def executions_per_computation(module: HloModule) -> dict[str, int]:
    """Runs of each computation per run of the entry: while bodies x their trip count.

    A while loop whose trip count cannot be read counts once and is listed in
    `module.unknown_trip_counts`. Conditional branches count as if each ran (an upper bound).
    """
    @functools.cache
    def count(name: str) -> int:
        if name == module.entry:
            return 1
        total = 0
        for site in module.call_sites.get(name, []):
            trips = trip_count(module, site) if site.opcode == "while" else 1
            is_condition = site.opcode == "while" and site.attribute("condition") in (
                name, f"%{name}")
            total += count(module.owner[site.name]) * (trips + 1 if is_condition else trips)
        return total

    return {name: count(name) for name in module.computations}


def trip_count(module: HloModule, loop: Instruction) -> int:
    """Iterations of a while loop: XLA's known_trip_count, else its condition's one bound."""
    known = _TRIP_COUNT.search(loop.attributes)
    if known:
        return int(known.group(1))
    condition = (loop.attribute("condition") or "").lstrip("%")
    bounds = [int(i.arguments) for i in module.computations.get(condition, [])
              if i.opcode == "constant" and re.match(r"[su](32|64)\[\]", i.shape)
              and re.fullmatch(r"-?\d+", i.arguments.strip())]
    if len(bounds) == 1 and bounds[0] > 0:
        return bounds[0]
    if loop.name not in module.unknown_trip_counts:
        module.unknown_trip_counts.append(loop.name)
    return 1


# ----- where a value comes from ----------------------------------------------------------------

def entry_argument(module: HloModule, name: str) -> str:
    """The entry parameter a value is (or a slice of), up to layout changes (bitcast, copy,
    transpose, reshape, convert, slices, and fusions of only those), also through the tuples
    that carry it into while loops and calls: its op_name (the argument path, e.g.
    "state.params['bert'][...]"). "" when the value is computed."""
    return _trace(module, name, None, 0)


def _trace(module: HloModule, name: str, index: Optional[int], depth: int) -> str:
    instruction = module.instructions.get(name)
    if instruction is None or depth > 64:
        return ""
    opcode = instruction.opcode
    if opcode == "get-tuple-element" and index is None:
        return _trace(module, instruction.operands[0], int(instruction.attribute("index")),
                      depth + 1)
    if opcode == "tuple" and index is not None and index < len(instruction.operands):
        return _trace(module, instruction.operands[index], None, depth + 1)
    if opcode == "parameter":
        return _parameter_origin(module, instruction, index, depth)
    if index is None and _is_layout_only(module, instruction):
        data = max(instruction.operands, key=lambda o: array_bytes(
            module.instructions[o].shape) if o in module.instructions else 0)
        return _trace(module, data, None, depth + 1)
    return ""


def _parameter_origin(module: HloModule, parameter: Instruction, index: Optional[int],
                      depth: int) -> str:
    computation = module.owner[parameter.name]
    if computation == module.entry:
        return parameter.op_name if index is None else ""
    sites = module.call_sites.get(computation, [])
    if len(sites) != 1 or sites[0].opcode not in ("while", "call"):
        return ""
    number = int(parameter.arguments)
    if number >= len(sites[0].operands):
        return ""
    return _trace(module, sites[0].operands[number], index, depth + 1)


def _is_layout_only(module: HloModule, instruction: Instruction) -> bool:
    """Whether the value is its (largest) operand's elements, or a part of them, moved; the
    other operands of a slice are its start indices."""
    if instruction.opcode in SLICE_OPCODES:
        return True
    if instruction.opcode == "fusion":
        body = module.computations.get((instruction.attribute("calls") or "").lstrip("%"), [])
        moved = [i for i in body if i.opcode not in LAYOUT_OPCODES | SLICE_OPCODES
                 and not _is_scalar(i.shape)]  # scalar work computes the slice's start
        sliced = any(i.opcode in SLICE_OPCODES for i in body)
        return bool(body) and not moved and (len(instruction.operands) == 1 or sliced)
    return len(instruction.operands) == 1 and instruction.opcode in LAYOUT_OPCODES - {"parameter"}


def _is_scalar(shape: str) -> bool:
    found = arrays(shape)
    return bool(found) and all(dims == () for _, dims in found)


def element_values(module: HloModule, name: str) -> dict[Optional[int], list[str]]:
    """The names that hold each element of a value: {tuple index: get-tuple-element names},
    or {None: [name]} for a value used whole."""
    found: dict[Optional[int], list[str]] = {}
    for user in module.users.get(name, []):
        if user.opcode == "get-tuple-element":
            found.setdefault(int(user.attribute("index")), []).append(user.name)
        else:
            found[None] = [name]
    return found


def iter_instructions(module: HloModule) -> Iterator[tuple[str, Instruction]]:
    for computation, body in module.computations.items():
        for instruction in body:
            yield computation, instruction
