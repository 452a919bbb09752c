"""Which entries of a checkpoint folder are steps, as Orbax names and lists them.

A step's folder is named by its number alone (`is_step_name`: no sign, no leading zero).
`step_numbers(directory)` lists those that are folders; `warn_misnamed(directory)` says in one
line each which entries are named by a number that is no step's name ("06", a zero-padded copy:
Orbax skips them, and a reader that took "06" for step 6 would read a folder "6" that is not
there); `not_step_folders(directory)` finds the entries named as a step that are no folder (a
dangling symbolic link, a file), which the store sets aside like an unreadable step.
"""

from __future__ import annotations

import os

from absl import logging

from bert_jax.runtime import paths


def is_step_name(name: str) -> bool:
    """Whether `name` is a step folder's name: the step's number, no sign, no leading zero."""
    return name.isdigit() and str(int(name)) == name


def step_numbers(directory: str | os.PathLike) -> list[int]:
    """The steps of `directory`'s step folders (named by `is_step_name`), in order."""
    return sorted(int(p.name) for p in paths.path(directory).iterdir()
                  if is_step_name(p.name) and p.is_dir())


def misnamed_steps(directory: str | os.PathLike) -> list[str]:
    """The entries of `directory` named by a number that is no step's name ("06", "0004")."""
    directory = paths.path(directory)
    if not directory.is_dir():
        return []
    return sorted(p.name for p in directory.iterdir()
                  if p.name.isdigit() and not is_step_name(p.name))


def warn_misnamed(directory: str | os.PathLike) -> None:
    """One warning line for each of `misnamed_steps(directory)`: it is ignored."""
    for name in misnamed_steps(directory):
        logging.warning("%s/%s is not a checkpoint step (a step's folder is named by its number "
                        "alone, e.g. %d): ignored", directory, name, int(name))


def not_step_folders(directory: str | os.PathLike) -> list[tuple[int, str]]:
    """(step, what it is) of each entry of `directory` named as a step that is not a folder: a
    symbolic link whose target does not exist (or is no folder), a file. Orbax does not list
    them as steps, yet a save of that step would meet them; `store.set_aside` moves them like an
    unreadable step. A link to a step folder elsewhere is a step."""
    directory = paths.path(directory)
    if paths.is_remote(directory) or not directory.is_dir():
        return []
    found = []
    for entry in directory.iterdir():
        if not is_step_name(entry.name) or entry.is_dir():
            continue
        local = os.fspath(entry)
        if os.path.islink(local):
            target = os.readlink(local)
            what = (f"a symbolic link to {target}, which does not exist"
                    if not os.path.exists(local) else f"a symbolic link to {target}, not a folder")
        else:
            what = "a file, not a step folder"
        found.append((int(entry.name), what))
    return sorted(found)
