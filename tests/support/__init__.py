"""Helpers the test modules share. Test modules import from here (or get
fixtures from a conftest.py), never from another test module or from
tests/conftest.py: tests/test_layout.py keeps it so."""
