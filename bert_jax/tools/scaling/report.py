"""One record per compiled step (JSON-ready), its text form, and markdown tables of several.

A record holds the run's shape (model, mesh, batch), the parameters' bytes, per-device memory
and FLOPs, the collectives' traffic by kind and mesh axes, the parameter all-gathers, and the
projected step time on each target. ASSUMPTIONS is printed with every report.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

from bert_jax.runtime.sharding import MESH_AXES
from bert_jax.tools.scaling import collectives, hlo, memory, projection, roofline, targets, traffic
from bert_jax.tools.scaling.chips import Chip
from bert_jax.tools.scaling.program import CompiledStep

ASSUMPTIONS = """\
Assumptions of the projections (bert_jax/tools/scaling: targets.py, projection.py, traffic.py):
- compute = model FLOPs per device (bert_jax/train/flops.py: 3 x the forward pass's matmul
  FLOPs, remat excluded) / (peak bf16 FLOP/s x MFU); the MFU is assumed, not measured.
- collectives move the ring algorithm's bytes: all-reduce 2(n-1)/n of its payload,
  all-gather / reduce-scatter / all-to-all (n-1)/n, collective-permute all of it, per device.
- across domains (TPU slice over DCN, GPU node over InfiniBand) a two-level algorithm: f(k) B on
  the fast links, f(m) B / k on the slow ones (m domains, k devices of the group per domain);
  latency log2 hops per level and phase at 1 us (ICI, NVLink), 5 us (InfiniBand), 10 us (DCN).
- fast-link bandwidth per device per direction: the whole ICI (every port) or NVLink figure.
- step time bounds: no overlap = compute + comm; full overlap = max(compute, comm).
- devices lie in mesh order (partition p in domain p // domain size).
- the program is XLA:CPU's, compiled for N fake CPU devices: its collectives, shapes and
  dtypes are the SPMD partitioner's; XLA:CPU keeps two patterns a GPU/TPU compiler rewrites,
  so the projections use effective bytes: all-reduce + 1/n dynamic-slice runs as a
  reduce-scatter, add(all-reduce(a), all-reduce(b)) as one all-reduce. Memory figures are
  XLA:CPU's buffer assignment (scheduler, fusion and layouts differ on TPU/GPU).
"""


def analyse(step: CompiledStep, target_names: Sequence[str], mfu: float,
            chip: Optional[Chip] = None) -> dict[str, Any]:
    """The record of one compiled step (module docstring); with `chip`, the program is the
    chip's own (compiled for its devices) and the record holds `chip_report`."""
    mesh_shape = tuple(step.mesh.devices.shape)
    found, module = collectives.collectives(step.compiled.as_text(), step.num_devices)
    rows = traffic.summarize(found, mesh_shape, MESH_AXES)
    memory_stats = memory.memory_per_device(step.compiled)
    flops_per_device = step.model_flops_per_step / step.num_devices
    tokens = step.batch_size * step.seq_len
    cfg = step.model_config
    record = {
        "model": {"hidden_size": cfg.hidden_size, "num_hidden_layers": cfg.num_hidden_layers,
                  "vocab_size": cfg.vocab_size, "dtype": cfg.dtype,
                  "remat_policy": cfg.remat_policy},
        "mesh": dict(zip(MESH_AXES, mesh_shape)), "devices": step.num_devices,
        "batch_size": step.batch_size, "rows_per_device": step.batch_size / step.num_devices,
        "seq_len": step.seq_len, "accumulation_steps": step.accumulation_steps,
        "params": {"bytes": step.param_bytes, "bytes_per_device": step.param_bytes_per_device,
                   "fsdp_bytes": step.fsdp_param_bytes,
                   "word_embedding_bytes": step.word_embedding_bytes},
        "memory_per_device": memory_stats,
        "flops": {"model_per_step": step.model_flops_per_step,
                  "model_per_device": flops_per_device,
                  "hlo_per_device": memory.hlo_flops_per_device(step.compiled)},
        "collectives": [row.to_dict() for row in rows],
        "wire_bytes_per_device": sum(r.wire_bytes for r in rows),
        "effective_wire_bytes_per_device": sum(r.effective_wire_bytes for r in rows),
        "collective_ops_per_step": sum(r.ops for r in rows),
        "parameter_gathers": traffic.parameter_gathers(found),
        "unknown_trip_counts": list(module.unknown_trip_counts),
        "projections": {name: projection.project(
            targets.get(name), found, flops_per_device, tokens, memory_stats.get("peak", 0),
            mfu).to_dict() for name in target_names},
    }
    if chip is not None:
        loops = any(i.opcode == "while" for _, i in hlo.iter_instructions(module))
        record["chip_report"] = chip_report(step, record, chip, loops)
    return record


def chip_report(step: CompiledStep, record: dict[str, Any], chip: Chip,
                loops: bool) -> dict[str, Any]:
    """Memory against HBM, XLA's cost analysis, the roofline bound and the fsdp traffic of a
    program compiled for `chip`'s devices (bert_jax.tools.scaling.roofline); `loops`: the program
    holds a while loop (its body's bytes are counted once by the cost analysis)."""
    cost = memory.hlo_cost(step.compiled)
    mesh = record["mesh"]
    collective_bytes = record["wire_bytes_per_device"]  # as compiled: the chip's own program
    return {
        "chip": chip.name, "source": chip.source,
        "memory": roofline.memory_fit(record["memory_per_device"], chip),
        "cost_analysis": {"flops": cost.get("flops"), "bytes_accessed": cost.get("bytes accessed"),
                          "counts_loop_bodies_once": loops},
        "roofline": roofline.bound(chip, record["flops"]["model_per_device"],
                                   cost.get("bytes accessed"), collective_bytes,
                                   step.batch_size * step.seq_len, loops),
        "fsdp_traffic": roofline.fsdp_traffic(
            record["collectives"], mesh["fsdp"], step.fsdp_param_bytes,
            step.param_bytes - step.fsdp_param_bytes, mesh["data"] * mesh["fsdp"]),
        "fsdp_collectives": step.fsdp_collectives,
        # Partial tiles matter to the partitioner's collectives; explicit ones move whole tiles.
        "fsdp_untiled_params": list(step.fsdp_untiled) if step.fsdp_collectives == "xla" else [],
    }


def _mb(x: float) -> str:
    return f"{x / 1e6:,.1f} MB"


def _gib(x: float) -> str:
    return f"{x / 2**30:.2f} GiB"


def mesh_label(record: dict) -> str:
    return "({data},{fsdp},{tensor})".format(**record["mesh"])


def format_record(record: dict) -> str:
    """The text report of one record."""
    mem, flops = record["memory_per_device"], record["flops"]
    hlo = flops["hlo_per_device"]
    lines = [
        f"== mesh (data,fsdp,tensor)={mesh_label(record)} on {record['devices']} devices; "
        f"batch {record['batch_size']} x {record['seq_len']} tokens "
        f"({record['rows_per_device']:g} rows per device), {record['model']['dtype']}, "
        f"accumulation {record['accumulation_steps']}",
        f"parameters {_mb(record['params']['bytes'])}, per device "
        f"{_mb(record['params']['bytes_per_device'])}",
        "memory per device: " + ", ".join(f"{k} {_gib(v)}" for k, v in mem.items()),
        f"FLOPs per device per step: model {flops['model_per_device']:.3g}, XLA "
        + (f"{hlo:.3g}" if hlo is not None else "n/a"),
        "collectives per device per step (kind, mesh axes, group, ops, payload, wire, effective, "
        "dtypes):",
    ]
    for row in record["collectives"]:
        payload = row["result_bytes"] if row["kind"] == "all-gather" else row["operand_bytes"]
        lines.append(f"  {row['kind']:<19} {row['axes']:<18} n={row['group_size']:<5} "
                     f"ops={row['ops']:<5} {_mb(payload):>12} {_mb(row['wire_bytes']):>12} "
                     f"{_mb(row['effective_wire_bytes']):>12} {','.join(row['dtypes'])}")
    gathers = record["parameter_gathers"]
    lines.append("all-gathers: parameters (first gather) " + _mb(gathers["parameters"])
                 + ", re-gathered " + _mb(gathers["regathered"]) + ", activations "
                 + _mb(gathers["activations"]))
    for p in record["projections"].values():
        lines.append(f"  {p['target']}: compute {p['compute_s'] * 1e3:.2f} ms, comm "
                     f"{p['comm_s'] * 1e3:.2f} ms (slow network {p['comm_slow_s'] * 1e3:.2f}, "
                     f"latency {p['latency_s'] * 1e3:.2f}); step "
                     f"{p['step_s_full_overlap'] * 1e3:.2f}..{p['step_s_no_overlap'] * 1e3:.2f} ms"
                     f"; memory fits: {p['memory_fits']}")
    if record["unknown_trip_counts"]:
        lines.append(f"while loops counted once (trip count unknown): "
                     f"{record['unknown_trip_counts']}")
    return "\n".join(lines)


def markdown_table(records: Sequence[dict]) -> str:
    """One row per record: mesh, memory, traffic and the step-time bounds per target."""
    names = list(records[0]["projections"]) if records else []
    header = ["devices", "mesh", "peak mem/dev", "args/dev", "wire MB/dev", "effective MB/dev"]
    header += [f"{records[0]['projections'][n]['target'].split(' (')[0]} step ms"
               for n in names]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in records:
        mem = r["memory_per_device"]
        cells = [str(r["devices"]), mesh_label(r), _gib(mem.get("peak", 0)),
                 _gib(mem.get("arguments", 0)), f"{r['wire_bytes_per_device'] / 1e6:,.0f}",
                 f"{r['effective_wire_bytes_per_device'] / 1e6:,.0f}"]
        for n in names:
            p = r["projections"][n]
            fits = "" if p["memory_fits"] else " (OOM)"
            cells.append(f"{p['step_s_full_overlap'] * 1e3:.1f}-"
                         f"{p['step_s_no_overlap'] * 1e3:.1f}{fits}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def format_chip(record: dict) -> str:
    """The text of a record's chip_report (empty without one)."""
    c = record.get("chip_report")
    if not c:
        return ""
    mem, roof, cost = c["memory"], c["roofline"], c["cost_analysis"]
    lines = [f"on {c['chip']} ({c['source']}):",
             f"  memory per chip {_gib(mem['peak_bytes'])} of {_gib(mem['hbm_bytes'])} HBM: "
             + ("fits" if mem["fits"] else "DOES NOT FIT")
             + f", headroom {_gib(mem['headroom_bytes'])}",
             "  cost analysis: "
             + (f"{cost['flops']:.3g} FLOPs, " if cost["flops"] is not None else "")
             + (f"{cost['bytes_accessed'] / 1e9:.2f} GB accessed"
                if cost["bytes_accessed"] is not None else "no bytes accessed")
             + (" (loop bodies counted once)" if cost["counts_loop_bodies_once"] else ""),
             f"  roofline: compute {roof['compute_s'] * 1e3:.2f} ms, "
             f"HBM {roof['memory_s'] * 1e3:.2f} ms, ICI {roof['network_s'] * 1e3:.2f} ms -> "
             f"limited by {roof['limited_by']}, "
             f"MFU <= {roof['mfu_bound']:.0%}, <= {roof['tokens_per_s_bound']:,.0f} tokens/s"]
    fsdp = c["fsdp_traffic"]
    if fsdp:
        kinds = ", ".join(f"{k} {_mb(v)}" for k, v in sorted(fsdp["by_kind"].items()))
        lines.append(f"  fsdp traffic {_mb(fsdp['measured_bytes'])} per chip vs ideal "
                     f"{_mb(fsdp['ideal_bytes'])} (all-gather + reduce-scatter): "
                     f"{fsdp['ratio']:.2f}x" + (" FLAGGED" if fsdp["flagged"] else "")
                     + f" [{kinds}]; collectives: {c['fsdp_collectives']}")
        if fsdp["flagged"] and c["fsdp_collectives"] == "xla":
            lines.append("  (--fsdp_collectives=explicit, config.fsdp_collectives, writes them "
                         "out: bert_jax/train/fsdp.py)")
    if c["fsdp_untiled_params"]:
        lines.append(f"  {len(c['fsdp_untiled_params'])} fsdp-split parameters have shards of "
                     "partial TPU tiles (8 rows x 128 lanes), e.g. "
                     + "; ".join(c["fsdp_untiled_params"][:3]))
    return "\n".join(lines)


def chip_table(records: Sequence[dict]) -> str:
    """One row per record compiled for a chip: memory against HBM, traffic and the bound."""
    header = ["chip", "chips", "mesh", "batch x len", "peak/chip", "HBM used", "args/chip",
              "temps/chip", "collective MB/chip", "fsdp vs ideal", "bound", "MFU bound"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in records:
        c = r.get("chip_report")
        if not c:
            continue
        mem, roof, fsdp = r["memory_per_device"], c["roofline"], c["fsdp_traffic"]
        cells = [c["chip"], str(r["devices"]), mesh_label(r), f"{r['batch_size']} x {r['seq_len']}",
                 _gib(mem.get("peak", 0)), f"{c['memory']['used_fraction']:.0%}"
                 + ("" if c["memory"]["fits"] else " (OOM)"), _gib(mem.get("arguments", 0)),
                 _gib(mem.get("temporaries", 0)),
                 f"{r['wire_bytes_per_device'] / 1e6:,.0f}",
                 f"{fsdp['ratio']:.2f}x" if fsdp else "-",
                 roof["limited_by"], f"{roof['mfu_bound']:.0%}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
