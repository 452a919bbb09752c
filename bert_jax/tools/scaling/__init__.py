"""A scaling report read from the compiled program (experiments/scaling_report.py).

    program.py      the pre-training train step, compiled ahead of time for a mesh of fake devices
    hlo.py          a reader of the HLO text: instructions, shapes, loop trip counts, value origins
    groups.py       device groups of a collective, from each of XLA's spellings
    collectives.py  every collective of the program: bytes per device, groups, runs per step
    traffic.py      per-step traffic by kind and mesh axes (ring bytes), parameter all-gathers
    memory.py       per-device memory and XLA's FLOP count of the compiled program
    targets.py      the machines projected onto: published figures and the assumptions
    projection.py   step time on a target: compute at an assumed MFU, collectives on two levels
    report.py       one record per compiled step, its text, markdown tables; ASSUMPTIONS
"""
