"""The host a benchmark ran on, written beside its figures in bench/results/*.json: the host
kind varies between runs (Zen 4, Zen 5, Emerald Rapids, AVX2-only), and figures from
different hosts are never compared, so each result file names its own."""
import os

import podlet


def host():
    """The CPU (podlet.cpu_info()['cpu']: vendor, brand, family, model, stepping), its best
    and active kernel ISA, the logical CPUs and podlet's kernel threads."""
    info = podlet.cpu_info()
    return {"cpu": info["cpu"], "best_isa": info["best_isa"], "active_isa": info["active_isa"],
            "logical_cpus": os.cpu_count(), "threads": podlet._core.num_threads()}
