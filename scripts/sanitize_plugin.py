"""pytest plugin for scripts/sanitize.sh: a sanitizer report fails the test that caused it.

The sanitized core is built with recovery on, so a report does not end the run. The
runtimes write reports to files under $PODLET_SANITIZE_LOGS (log_path; subprocesses such
as mpirun's ranks and the CLI inherit it). After every test this plugin looks for report
files that are new or have grown, and for UBSan lines in the test's captured stderr
(UBSan may print to stderr instead of its log_path when libasan is preloaded), and turns
them into a failure of that test showing the report. At the end it prints how many
reports it saw and fails the session if there were any, so that pytest's summary line is
the verdict of the whole run.
"""
import os
import re

import pytest

_LOGS = os.environ.get("PODLET_SANITIZE_LOGS", "")
_UBSAN_LINE = re.compile(r"runtime error: |ERROR: (Address|Thread|UndefinedBehavior)Sanitizer|WARNING: ThreadSanitizer")
_seen = {}      # report file -> bytes already attributed
_reports = []   # (test id, excerpt)


def _new_report_text():
    if not _LOGS or not os.path.isdir(_LOGS):
        return ""
    parts = []
    for name in sorted(os.listdir(_LOGS)):
        path = os.path.join(_LOGS, name)
        size = os.path.getsize(path)
        if size > _seen.get(path, 0):
            with open(path, errors="replace") as f:
                f.seek(_seen.get(path, 0))
                parts.append(f"--- {name}\n" + f.read())
            _seen[path] = size
    return "".join(parts)


def pytest_sessionstart(session):
    _new_report_text()  # reports from start-up (imports) are not any test's


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.when not in ("call", "teardown"):
        return
    text = _new_report_text()
    stderr_hits = [ln for ln in (rep.capstderr or "").splitlines() if _UBSAN_LINE.search(ln)]
    if stderr_hits:
        text += "--- captured stderr\n" + "\n".join(stderr_hits) + "\n"
    if text:
        _reports.append((item.nodeid, text))
        rep.outcome = "failed"
        rep.longrepr = f"sanitizer report during {rep.when} of {item.nodeid}:\n{text[:20000]}"


def pytest_sessionfinish(session, exitstatus):
    text = _new_report_text()
    if text:
        _reports.append(("(outside any test)", text))
    tr = session.config.pluginmanager.get_plugin("terminalreporter")
    if tr is not None:
        tr.write_line(f"sanitizer reports: {len(_reports)}" +
                      "".join(f"\n  {nodeid}" for nodeid, _ in _reports))
    if _reports and session.exitstatus == 0:
        session.exitstatus = 1
