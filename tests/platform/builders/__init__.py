"""Builders of the members' test objects, importable as `tests.platform.builders.<member>`.

Here, not in each member's `tests/` folder: a member's folder name has a hyphen
(`services/node-labeller`), so its tests could only be reached by putting the folder itself on
pytest's path, where every helper needs a name unique across the workspace and a bench needs the
same path trick. One package under the repository root, which pytest and the benches already
have on their path, gives each helper one dotted name that every test, harness and bench
imports alike, and keeps them out of the shipped packages (a service's own `testing` module
would put test builders, hypothesis strategies and a reference planner into its image).
A member's `tests/` holds its `test_*.py` modules and at most a `conftest.py`.
"""
