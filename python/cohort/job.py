"""The Cohort job this process is a worker of, when `cohort run` started it.

A script that `cohort run` launches (`cohort run train.py`, or a job file's `program:`) joins its
job when it imports cohort: the launcher, the console and `cohort status` see it; its first
`init_process_group("cohort")` runs on the job's communicator; an uncaught exception is reported
as the worker's failure, a normal end as its summary. `report()` is how its progress reaches the
launcher's progress line, metrics.jsonl and the console. Outside such a job, `report()` does
nothing, so the same script runs under torchrun too.
"""

import atexit
import json
import math
import sys
import time

from cohort import _C

_state = {"joined": False, "first": None, "last": {}, "samples": 0, "steps": 0}


def _numbers(values):
    out = {}
    for key, value in values.items():
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"cohort.report: {key}={value!r} is not a number")
        if isinstance(value, float) and not math.isfinite(value):
            value = str(value)  # JSON has no NaN; the console shows the text
        out[key] = value
    return out


def report(step, *, loss=None, accuracy=None, test_accuracy=None, test_loss=None, epoch=None,
           epochs=None, total_steps=None, samples=None, **metrics):
    """Reports this worker's progress at a step boundary: `step` steps are done.

    `samples` is the number of samples this worker trained on since its previous report (the
    launcher shows the job's rate from it); `loss` and `accuracy` are the console's curves, and
    `total_steps`, `epoch` and `epochs` its progress bar and ETA. Any other keyword is kept in
    metrics.jsonl. Rank 0's reports are the job's progress; every rank's are its live status.
    The job file's faults for this rank fire at the step reported.
    """
    if not _state["joined"]:
        return
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise TypeError(f"cohort.report: step={step!r} is not a non-negative integer")
    record = {"step": step}
    record.update(_numbers(dict(loss=loss, accuracy=accuracy, test_accuracy=test_accuracy,
                                test_loss=test_loss, epoch=epoch, epochs=epochs,
                                total_steps=total_steps, samples=samples)))
    record.update(_numbers(metrics))
    now = time.monotonic()
    if _state["first"] is None:
        _state["first"] = now
    _state["last"].update(record)
    _state["samples"] += samples or 0
    _state["steps"] = step
    _state["end"] = now
    _C._job_report(json.dumps(record))


def _summary():
    last = _state["last"]
    s = {"steps": _state["steps"], "samples": _state["samples"]}
    if _state["first"] is not None:
        s["train_seconds"] = _state["end"] - _state["first"]
    for key, name in (("loss", "final_loss"), ("test_accuracy", "test_accuracy"),
                      ("test_loss", "test_loss")):
        if key in last:
            s[name] = last[key]
    return s


def _at_exit():
    if not _state.get("excluded"):
        _C._job_finish(json.dumps(_summary()))


def _on_uncaught(kind, value, tb):
    # A lost peer or an aborted epoch is the consequence of another worker's failure, which the
    # coordinator knows first hand; this worker's own errors are reported as its failure.
    if not isinstance(value, (_C.PeerLostError, _C.AbortedError)):
        _C._job_failed(f"{kind.__name__}: {value}", isinstance(value, _C.TimeoutError))
    _previous_hook(kind, value, tb)


_previous_hook = sys.excepthook


def _join():
    if _state["joined"] or not _C._job_start():
        return
    _state["joined"] = True
    sys.excepthook = _on_uncaught
    atexit.register(_at_exit)
