"""Helpers the bench scripts share: the host's CPU name and writing a finished table."""


def cpu_model():
    """The `model name` of /proc/cpuinfo, or "?"."""
    with open("/proc/cpuinfo") as f:
        return next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "?")


def emit(lines, write=None):
    """Prints the table made of `lines` and, with `write`, appends it to that Markdown file."""
    table = "\n".join(lines) + "\n"
    print(table)
    if write:
        with open(write, "a") as f:
            f.write("\n" + table)
