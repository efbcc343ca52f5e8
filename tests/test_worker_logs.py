"""A Ray worker's crash noise on the driver's console becomes one raysfl line; Ray's token line is hidden."""

from __future__ import annotations

import functools
import logging

from raysfl.runtime import worker_logs
from raysfl.runtime.ray_noise import TOKEN_AUTH_LOGGER, hide_token_auth_line

CRASH = ["Fatal Python error: Aborted", "", "Thread 0x00007f (most recent call first):",
         '  File "/x/ray/_private/worker.py", line 946 in main_loop', "<no Python frame>",
         "Extension modules: numpy.core, torch._C (total: 80)"]


def test_crash_lines_are_dropped_and_other_lines_kept():
    keep, first, going = worker_logs.crash_lines(["hello", *CRASH, "Mutex corrupt"], False)
    assert keep == ["hello"] and first == "Fatal Python error: Aborted" and going
    # the report goes on in the next batch of the same process, then its own output comes back
    keep, first, going = worker_logs.crash_lines(['  File "a.py", line 1 in f', "round 2 ok"], True)
    assert keep == ["round 2 ok"] and first is None and not going
    assert worker_logs.crash_lines(["  File 'x' is a word in a user's print"], False)[0] == [
        "  File 'x' is a word in a user's print"]


def test_the_filtered_printer_says_one_line_per_crash(capsys):
    printed = []
    handler = functools.partial(worker_logs._filtered, lambda data, ignore_prefix: printed.append(data["lines"]),
                                ignore_prefix=False, session_dir="/tmp/ray/session_x")
    handler({"pid": 11, "is_err": True, "lines": ["step 1", *CRASH]})
    handler({"pid": 11, "is_err": True, "lines": ['  File "b.py", line 2 in g']})
    handler({"pid": 12, "is_err": False, "lines": ["fine"]})
    assert printed == [["step 1"], ["fine"]]
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["raysfl: note: a Ray worker (pid 11) crashed (Fatal Python error: Aborted); Ray restarts it and "
                   "the run goes on (its log: /tmp/ray/session_x/logs)"]


def test_install_swaps_rays_printer_once(monkeypatch):
    from ray._private import worker as ray_worker
    from ray._private.ray_logging import WorkerStandardStreamDispatcher

    d = WorkerStandardStreamDispatcher()
    monkeypatch.setattr(ray_worker, "global_worker_stdstream_dispatcher", d)
    assert not worker_logs.install()  # log_to_driver=False: nothing to swap
    d.add_handler("ray_print_logs", functools.partial(ray_worker.print_to_stdstream, ignore_prefix=True))
    assert worker_logs.install() and worker_logs.install()
    (name, handler), = d.handlers
    assert name == "ray_print_logs" and handler.raysfl_filtered and handler.keywords["ignore_prefix"]


def test_rays_token_authentication_line_is_hidden(caplog):
    hide_token_auth_line()
    hide_token_auth_line()
    log = logging.getLogger(TOKEN_AUTH_LOGGER)
    with caplog.at_level(logging.INFO, logger=TOKEN_AUTH_LOGGER):
        log.warning("Token authentication is enabled for this Ray cluster. Set RAY_AUTH_MODE=disabled to opt out.")
        log.warning("Token authentication is disabled for this Ray cluster.")
    assert [r.getMessage() for r in caplog.records] == ["Token authentication is disabled for this Ray cluster."]
    assert len(log.filters) == 1
