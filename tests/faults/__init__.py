"""Regression tests for reported faults, one file per kind of fault."""
