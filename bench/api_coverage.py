"""How much of JAX / Flax / Optax's public API podlet mirrors: per module pair, the public
names (dir() entries without a leading underscore, modules excluded) the reference
defines, how many of them podlet's mirror defines, and the ones it lacks. Names excluded
on purpose are listed below with the reason and counted apart.

    .venv/bin/python bench/api_coverage.py               # table
    .venv/bin/python bench/api_coverage.py --missing     # + every missing name

Writes bench/results/api_coverage.json. "Defined" means present in the mirror module;
a name that exists only to raise NotImplementedError is a bug (tests/test_packaging.py
keeps the import side honest, the differential tests the values).
"""
import argparse
import importlib
import inspect
import json
import os
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))

# (reference module, podlet module)
PAIRS = [
    ("jax", "podlet"),
    ("jax.numpy", "podlet.numpy"),
    ("jax.numpy.linalg", "podlet.numpy.linalg"),
    ("jax.numpy.fft", "podlet.numpy.fft"),
    ("jax.lax", "podlet.lax"),
    ("jax.random", "podlet.random"),
    ("jax.nn", "podlet.nn"),
    ("jax.tree_util", "podlet.tree_util"),
    ("flax.linen", "podlet.nn"),
    ("optax", "podlet.optim"),
    ("flax.jax_utils", "podlet.jax_utils"),
    ("flax.serialization", "podlet.serialization"),
    ("flax.traverse_util", "podlet.traverse_util"),
]

# Deliberate exclusions: name -> reason. Small and honest.
_DEVICE = "device / sharding / XLA-runtime API: podlet has one CPU backend, pmap and MPI (podlet.distributed)"
_FP8 = "fp8 / int4 types: no CPU kernels use them"
_GPU = "GPU / TPU-only knob"
EXCLUDED = {
    "jax": {n: _DEVICE for n in ("default_backend", "device_put_sharded", "shard_map", "use_mesh",
                                 "make_array_from_callback",
                                 "make_array_from_single_device_arrays", "make_array_from_process_local_data",
                                 "live_arrays", "clear_backends", "profiler", "dlpack", "extend", "ffi",
                                 "export", "monitoring", "distributed", "experimental", "stages", "typing",
                                 "debug", "errors", "dtypes", "image", "scipy", "ops", "tree",
                                 "numpy", "lax", "random", "nn", "tree_util", "ad_checkpoint", "api_util",
                                 "core", "custom_batching", "custom_derivatives", "custom_transpose",
                                 "example_libraries", "interpreters", "lib", "version", "config", "Device",
                                 "copy_to_host_async", "device_get", "process_indices", "effects_barrier")},
    "jax.numpy": {**{n: _FP8 for n in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3b11fnuz", "float8_e4m3fnuz",
                                       "float8_e5m2fnuz", "float8_e3m4", "float8_e4m3", "float8_e8m0fnu",
                                       "float4_e2m1fn", "int4", "uint4", "int2", "uint2")},
                  "fft": "module: counted by its own pair (jax.numpy.fft)",
                  "linalg": "module: counted by its own pair (jax.numpy.linalg)"},
    "jax.lax": {n: _GPU for n in ("ragged_all_to_all", "ragged_dot", "ragged_dot_general", "platform_dependent",
                                  "optimization_barrier", "pvary", "pcast", "psum_scatter", "all_to_all",
                                  "axis_size", "linalg")},
}


# Patterns excluded per reference module: (predicate on the name, reason).
PATTERNS = {
    "jax.lax": [(lambda n: n.endswith("_p"),
                 "Primitive objects (abs_p, ...): podlet's primitives are rows of its C++ registry, "
                 "reached through the lax functions")],
    "flax.linen": [(lambda n: "Fp8" in n or "fp8" in n.lower(), _FP8)],
}


def public_names(mod):
    out = set()
    for n in dir(mod):
        if n.startswith("_"):
            continue
        v = getattr(mod, n, None)
        if isinstance(v, types.ModuleType):
            continue
        if getattr(v, "__module__", "") in ("typing", "collections.abc", "typing_extensions"):
            continue  # Iterable, Any, ...: re-exported annotations
        out.add(n)
    return out


def excluded_names(ref_name, ref):
    ex = dict(EXCLUDED.get(ref_name, {}))
    for pred, why in PATTERNS.get(ref_name, []):
        for n in public_names(ref):
            if pred(n):
                ex.setdefault(n, why)
    return ex


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--missing", action="store_true", help="print every missing name")
    args = ap.parse_args()
    rows, total_ref, total_have = [], 0, 0
    for ref_name, mine_name in PAIRS:
        ref = importlib.import_module(ref_name)
        mine = importlib.import_module(mine_name)
        excluded = excluded_names(ref_name, ref)
        ref_names = public_names(ref) - set(excluded)
        have = {n for n in ref_names if hasattr(mine, n)}
        missing = sorted(ref_names - have)
        rows.append({"reference": ref_name, "podlet": mine_name, "names": len(ref_names), "defined": len(have),
                     "coverage": len(have) / max(1, len(ref_names)), "missing": missing,
                     "excluded": {n: excluded[n] for n in sorted(excluded) if hasattr(ref, n)}})
        total_ref += len(ref_names)
        total_have += len(have)
    print(f"{'reference':<16} {'podlet':<18} {'names':>6} {'defined':>8} {'coverage':>9}  excluded")
    for r in rows:
        print(f"{r['reference']:<16} {r['podlet']:<18} {r['names']:>6} {r['defined']:>8} {r['coverage']:>8.0%}  "
              f"{len(r['excluded'])}")
    print(f"{'all':<35} {total_ref:>6} {total_have:>8} {total_have / total_ref:>8.0%}")
    if args.missing:
        for r in rows:
            print(f"\n{r['reference']} missing ({len(r['missing'])}): " + ", ".join(r["missing"]))
    out = {"modules": rows, "total": {"names": total_ref, "defined": total_have, "coverage": total_have / total_ref},
           "exclusions": {r["reference"]: r["excluded"] for r in rows}}
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "api_coverage.json"), "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
