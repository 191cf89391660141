"""Every module podlet imports at run time is a declared dependency: a required one in
pyproject.toml's `dependencies`, or an optional feature's extra, imported only inside
the function that needs it and turned into an error naming the extra when missing. (A
fresh `make run` once failed on h5py, which only the test extra installed.)"""
import ast
import importlib.metadata
import pathlib
import re
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent
PKG = ROOT / "python" / "podlet"


def _dist_name(req):
    return re.split(r"[<>=!~\[; ]", req, maxsplit=1)[0].strip().lower().replace("_", "-")


def _project():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _third_party_imports():
    """{top-level module: [(file, node, enclosing function or None, inside try/except ImportError)]}"""
    found = {}
    for path in sorted(PKG.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        parents = {}
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                parents[child] = node
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            func, guarded, p = None, False, parents.get(node)
            while p is not None:
                if isinstance(p, ast.Try) and any(
                        isinstance(h.type, ast.Name) and h.type.id in ("ImportError", "ModuleNotFoundError")
                        for h in p.handlers):
                    guarded = True
                if isinstance(p, (ast.FunctionDef, ast.AsyncFunctionDef)) and func is None:
                    func = p.name
                p = parents.get(p)
            for name in names:
                top = name.split(".")[0]
                if top in sys.stdlib_module_names or top == "podlet":
                    continue
                found.setdefault(top, []).append((path.relative_to(ROOT), node.lineno, func, guarded))
    return found


def _distributions(module):
    dists = importlib.metadata.packages_distributions().get(module, [module])
    return {d.lower().replace("_", "-") for d in dists}


def test_run_time_imports_are_declared_dependencies():
    proj = _project()
    required = {_dist_name(r) for r in proj["dependencies"]}
    extras = {name: {_dist_name(r) for r in reqs} for name, reqs in proj["optional-dependencies"].items()
              if name != "test"}
    problems = []
    for module, sites in sorted(_third_party_imports().items()):
        dists = _distributions(module)
        if dists & required:
            continue
        extra = [e for e, ds in extras.items() if dists & ds]
        if not extra:
            problems.append(f"{module} (imported at {sites[0][0]}:{sites[0][1]}) is in no dependency list of "
                            f"pyproject.toml: add it to `dependencies`, or to an extra for an optional feature")
            continue
        for file, line, func, guarded in sites:
            if func is None or not guarded:
                problems.append(f"{file}:{line}: {module} belongs to the extra {extra[0]!r}, so it must be imported "
                                f"inside the function that needs it, under try/except ImportError")
            elif f"podlet[{extra[0]}]" not in (ROOT / file).read_text():
                problems.append(f"{file}: the ImportError for {module} should name `pip install 'podlet[{extra[0]}]'`")
    assert not problems, "\n".join(problems)


def test_the_check_sees_the_imports_it_must():
    found = _third_party_imports()
    # the modules podlet is built on, found where they are imported
    for module in ("numpy", "ml_dtypes", "yaml", "h5py", "tqdm", "matplotlib", "onnx"):
        assert module in found, module
    assert any(f.name == "checkpoints.py" for f, *_ in found["h5py"])
    onnx_sites = found["onnx"]
    assert all(func is not None and guarded for _, _, func, guarded in onnx_sites)
