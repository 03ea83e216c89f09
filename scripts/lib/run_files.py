"""Reading a run directory's files (events.jsonl, metrics.jsonl) while the job may still write them."""
import json


def jsonl(path):
    """The records of a JSON-lines file; a line being written (or garbled) is skipped, a file not
    there yet is empty."""
    rows = []
    try:
        with open(path) as f:
            for line in f:
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    pass
    except FileNotFoundError:
        pass
    return rows
