"""Environment provider suites (a package, so its conftest does not shadow tests/conftest.py)."""
