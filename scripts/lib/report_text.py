"""Shared by the benchmark scripts: how sizes read, and replacing a section of BENCHMARKS.md."""
import os


def human(b):
    """4096 -> '4 KiB', 1048576 -> '1 MiB', 4100 -> '4100 B'."""
    for unit in ["B", "KiB", "MiB", "GiB"]:
        if b < 1024 or b % 1024:
            return f"{b} {unit}"
        b //= 1024
    return f"{b} TiB"


def write_section(output, begin, end, lines):
    """Replaces the text between the markers begin and end in output (appends it if absent);
    returns the section's text."""
    text = open(output).read() if os.path.exists(output) else ""
    block = "\n".join(lines)
    if begin in text and end in text:
        text = text[:text.index(begin)] + block + text[text.index(end) + len(end):]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    with open(output, "w") as f:
        f.write(text)
    return block
