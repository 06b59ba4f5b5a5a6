"""Helpers the bench scripts share: a local agent to run through, the host's CPU name, and writing a
finished table."""
import contextlib
import json
import os
import subprocess
import tempfile
import time


@contextlib.contextmanager
def local_agent(bin_dir, port, name, settle_s=3.0):
    """A real `gpufleet-agent` from BIN_DIR on 127.0.0.1:PORT with its own cache directory, given
    SETTLE_S seconds to discover its devices, then registered as NAME in a fresh database.

    Yields (database path, the agent's `describe --json`); stops the agent on exit."""
    gpufleet = os.path.join(bin_dir, "gpufleet")
    with tempfile.TemporaryDirectory() as cache:
        agent = subprocess.Popen([os.path.join(bin_dir, "gpufleet-agent"), "--listen", f"127.0.0.1:{port}",
                                  "--cache-dir", cache], stderr=subprocess.DEVNULL)
        try:
            time.sleep(settle_s)
            db = os.path.join(cache, "bench.db")
            subprocess.run([gpufleet, "--db", db, "agents", "add", name, f"http://127.0.0.1:{port}"],
                           check=True, capture_output=True)
            info = json.loads(subprocess.run([gpufleet, "--db", db, "describe", name, "--json"], check=True,
                                             capture_output=True, text=True).stdout)
            yield db, info
        finally:
            agent.terminate()
            agent.wait()


def cpu_model():
    """The `model name` of /proc/cpuinfo, or "?"."""
    with open("/proc/cpuinfo") as f:
        return next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "?")


def emit(lines, path=None, append=True):
    """Prints the table made of `lines` and, with `path`, appends it to that Markdown file (or,
    with `append=False`, writes the file with it alone)."""
    table = "\n".join(lines) + "\n"
    print(table)
    if path:
        with open(path, "a" if append else "w") as f:
            f.write("\n" + table if append else table)
