"""Runs the podlet command (``podlet.cli.main``) and records every write this process
makes under a directory. Run by tests/test_mpi_train.py as one process and under
``mpirun -np 2``.

    python tests/mpi_train_worker.py WATCH_DIR LOG_PREFIX [--pause-at STEP GO_FILE] -- train CONFIG ...

``--pause-at``: before step STEP every process writes ``LOG_PREFIX.paused.<index>`` (its
pid) and waits until GO_FILE exists (so a test can signal a process mid-run, whatever
the machine's speed).

Writes ``LOG_PREFIX.<process index>.json``: the process and device counts, and under
"writes" the list of [event, path] of files opened for writing, created, renamed, removed or truncated under WATCH_DIR (an audit hook sees
Python's own file operations, which is how podlet writes config.yaml, metrics.jsonl,
summary.json, plots and, by its final rename, every checkpoint).
"""
import json
import os
import sys
import time

WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def main():
    sep = sys.argv.index("--")
    watch, prefix = os.path.abspath(sys.argv[1]), sys.argv[2]
    opts, argv = sys.argv[3:sep], sys.argv[sep + 1:]
    writes = []
    recording = [True]

    def under(p):
        if not isinstance(p, (str, bytes, os.PathLike)):
            return False
        p = os.path.abspath(os.fsdecode(p))
        return p == watch or p.startswith(watch + os.sep)

    def hook(event, args):
        if not recording[0]:
            return
        if event == "open":
            path, mode, flags = args
            if (mode and any(c in mode for c in "wax+")) or (mode is None and flags & WRITE_FLAGS):
                if under(path):
                    writes.append([event, os.fsdecode(path)])
        elif event in ("os.rename", "os.link", "os.symlink"):
            if under(args[0]) or under(args[1]):
                writes.append([event, os.fsdecode(args[1])])
        elif event in ("os.remove", "os.mkdir", "os.rmdir", "os.truncate", "shutil.rmtree", "os.chmod"):
            if under(args[0]):
                writes.append([event, os.fsdecode(args[0])])

    sys.addaudithook(hook)
    from podlet import cli
    from podlet.training import loop
    if "--pause-at" in opts:
        i = opts.index("--pause-at")
        pause_at, go = int(opts[i + 1]), opts[i + 2]
        make_data = loop.make_data

        def paused_data(cfg):
            data = make_data(cfg)
            batches = data.train_batches

            def train_batches(batch_size, start_step=0, **kw):
                for step, b in enumerate(batches(batch_size, start_step, **kw), start_step + 1):
                    if step == pause_at:
                        import podlet
                        with open(f"{prefix}.paused.{podlet.process_index()}", "w") as f:
                            f.write(str(os.getpid()))
                        deadline = time.time() + 120
                        while not os.path.exists(go) and time.time() < deadline:
                            time.sleep(0.01)
                    yield b
            data.train_batches = train_batches
            return data
        loop.make_data = paused_data
    try:
        status = cli.main(argv)
    finally:
        recording[0] = False
        import podlet
        with open(f"{prefix}.{podlet.process_index()}.json", "w") as f:
            json.dump({"writes": writes, "process_count": podlet.process_count(),
                       "devices": [podlet.device_count(), podlet.local_device_count()]}, f)
    sys.exit(status)


if __name__ == "__main__":
    main()
