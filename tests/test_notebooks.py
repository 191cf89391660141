"""The user notebooks run top to bottom (nbclient, a real Jupyter kernel); each ends with
assertions on what it computed, so a notebook that runs but learns nothing fails."""
import os

import nbformat
import pytest
from nbclient import NotebookClient

NB_DIR = os.path.join(os.path.dirname(__file__), "..", "notebooks")
NOTEBOOKS = ["01_quickstart.ipynb", "02_pmap.ipynb", "03_experiments.ipynb"]


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs(name, monkeypatch):
    # The kernel inherits this environment but runs in notebooks/: make paths absolute.
    for var in ("PODLET_CORE_DIR", "PYTHONPATH"):
        if os.environ.get(var):
            monkeypatch.setenv(var, os.pathsep.join(os.path.abspath(p) for p in os.environ[var].split(os.pathsep)))
    nb = nbformat.read(os.path.join(NB_DIR, name), as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": os.path.abspath(NB_DIR)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
    assert all(c.execution_count for c in nb.cells if c.cell_type == "code")
