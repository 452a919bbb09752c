"""Where the repository is, for every test and helper whatever its depth under tests/: ROOT (the
folder of setup.py) and TESTS (this folder, which conftest.py puts on sys.path so that the
helper modules here import as top-level modules from any sub-folder)."""

import os

TESTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS)
