"""Helpers the bench scripts share: a local agent to run through, one validated run through it, the
host's CPU name, writing a finished table or its rows one at a time, and timing HTTP requests (`free_port`, `load`, `pct`,
`timed_loads`)."""
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.request


def _exit_on_sigterm(signum, _frame):
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def local_agent(bin_dir, port, name, settle_s=3.0):
    """A real `gpufleet-agent` from BIN_DIR on 127.0.0.1:PORT with its own cache directory, given
    SETTLE_S seconds to discover its devices, then registered as NAME in a fresh database.

    Yields (database path, the agent's `describe --json`); stops the agent on exit. A SIGTERM (`timeout`,
    a device call's limit) ends the script by SystemExit from then on, so that this and the caller's other
    context managers still run: the agent stopped, temporary folders removed (an `8b` GGUF left behind
    filled a GPU host's disk for the next command)."""
    if (threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL):
        signal.signal(signal.SIGTERM, _exit_on_sigterm)
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


def teller(path=None):
    """A function printing a line at once and, with PATH, appending it to that file: rows that a run
    cut short keeps."""
    def say(line):
        print(line, flush=True)
        if path:
            with open(path, "a") as f:
                f.write(line + "\n")
    return say


def device_of(info, backend):
    """The first device of BACKEND in an agent's `describe --json`, a GPU before a CPU driver (PoCL)
    that shares the backend; None when the backend has none."""
    devs = [d for d in info["devices"] if d["backend"] == backend]
    devs = [d for d in devs if d["device_type"] != "cpu"] or devs
    return devs[0] if devs else None


def ours(bin_dir, db, agent, backend, device, kernel, params, variant=None, iters=20, min_seconds=0.5,
         dtype=None, timeout_s=300, env=None, mode=None):
    """One `gpufleet run` of KERNEL with PARAMS on DEVICE of AGENT (ENV: the worker's `--env` overrides, a
    dict; MODE: compute_only, the default, or with_transfers): the result as JSON (status, metric, config,
    validation...), or a result of status `error` with the tail of what the command said."""
    args = [os.path.join(bin_dir, "gpufleet"), "--db", db, "run", "--agent", agent, "--backend", backend,
            "--device", device, "--kernel", kernel, "--min-iterations", str(iters), "--min-seconds",
            str(min_seconds), "--json", "--timeout-s", str(timeout_s)]
    if variant:
        args += ["--variant", variant]
    if dtype:
        args += ["--dtype", dtype]
    if mode:
        args += ["--mode", mode]
    for k, v in params.items():
        args += ["--param", f"{k}={v}"]
    for k, v in (env or {}).items():
        args += ["--env", f"{k}={v}"]
    out = subprocess.run(args, capture_output=True, text=True)
    try:
        return json.loads(out.stdout)[0]
    except (ValueError, IndexError):
        return {"status": "error", "message": (out.stderr or out.stdout)[-300:], "config": {}}


def val(r):
    """A result's metric value (NaN when it has none)."""
    return r["metric"]["value"] if r.get("metric") else float("nan")


def pct(a, b):
    """a/b as a whole percentage, or "-" when either is missing."""
    return f"{a / b * 100:.0f}%" if b and a == a and b == b else "-"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def load(url, gzip=False):
    """(seconds, bytes) of one GET, the bytes as sent (compressed when GZIP asks for it); an https URL
    is not verified (a bench's self-signed serve)."""
    t = time.perf_counter()
    ctx = ssl._create_unverified_context() if url.startswith("https://") else None
    req = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"} if gzip else {})
    with urllib.request.urlopen(req, timeout=60, context=ctx) as r:
        body = r.read()
    return time.perf_counter() - t, len(body)


def percentile(xs, p):
    """The P-th percentile of XS (nearest rank)."""
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def timed_loads(base, path, n):
    """N timed GETs of BASE+PATH after one warm one: (seconds each, bytes of the last)."""
    load(base + path)  # warm
    times, size = [], 0
    for _ in range(n):
        t, size = load(base + path)
        times.append(t)
    return times, size


def rx580_fixture(root):
    """An RX 580's amdgpu sysfs under ROOT (a pathlib.Path): card0 -> PCI device 0000:03:00.0 with an
    hwmon power1_input of 8.123 W. Returns the power1_input file, which a test may rewrite."""
    dev = root / "sys/devices/pci0000:00/0000:03:00.0"
    card = root / "sys/class/drm/card0"
    card.mkdir(parents=True)
    files = {"device": "0x67df\n", "vendor": "0x1002\n", "uevent": "DRIVER=amdgpu\nPCI_SLOT_NAME=0000:03:00.0\n",
             "gpu_busy_percent": "37\n", "hwmon/hwmon2/name": "amdgpu\n",
             "hwmon/hwmon2/power1_input": "8123000\n", "hwmon/hwmon2/power1_cap": "145000000\n",
             "hwmon/hwmon2/temp1_input": "41000\n", "hwmon/hwmon2/temp1_label": "edge\n",
             "hwmon/hwmon2/freq1_input": "300000000\n"}
    for rel, text in files.items():
        (dev / rel).parent.mkdir(parents=True, exist_ok=True)
        (dev / rel).write_text(text)
    os.symlink(dev, card / "device")
    return dev / "hwmon/hwmon2/power1_input"


def sass_report(ptx_path, function):
    """ptxas -v and the SASS instruction mix of FUNCTION in the PTX at PTX_PATH (an NVIDIA OpenCL
    program's binary), as one line of text; the SASS is kept beside it (PTX_PATH.sass). Needs the CUDA
    toolkit's ptxas and cuobjdump (on PATH or in /usr/local/cuda/bin); says so when they are missing."""
    text = open(ptx_path, "rb").read().rstrip(b"\0").decode(errors="replace")
    cut = text.find(".metadata_section")
    if cut >= 0:
        text = text[:text.rfind("\n", 0, cut)] + "\n"
    clean, cubin = ptx_path + ".clean.ptx", ptx_path + ".cubin"
    open(clean, "w").write(text)
    tools = {t: shutil.which(t) or f"/usr/local/cuda/bin/{t}" for t in ("ptxas", "cuobjdump")}
    missing = [t for t, path in tools.items() if not os.path.exists(path)]
    if missing:
        return f"{function}: no {' or '.join(missing)} here (the PTX is kept: {clean})"
    p = subprocess.run([tools["ptxas"], "-arch=sm_90", "-v", "-O3", clean, "-o", cubin], capture_output=True,
                       text=True)
    info, fn_name = [], ""
    for line in (p.stdout + p.stderr).splitlines():
        m = re.search(r"(?:entry function|Function properties for) '?(\w+)", line)
        if m:
            fn_name = m.group(1)
        elif fn_name == function and ("spill" in line or "Used" in line):
            info.append(line.split(":", 1)[-1].strip())
    sass = subprocess.run([tools["cuobjdump"], "-sass", cubin], capture_output=True, text=True).stdout
    open(ptx_path + ".sass", "w").write(sass)
    fn = sass[sass.find(f"Function : {function}"):]
    nxt = fn.find("Function :", 10)
    fn = fn[:nxt] if nxt > 0 else fn
    code = []  # (address, opcode, the instruction's text)
    for line in fn.splitlines():
        m = re.search(r"/\*([0-9a-f]{4,})\*/\s+((?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)[^;]*)", line)
        if m:
            code.append((int(m.group(1), 16), m.group(3), m.group(2)))

    def mix(part):
        ops = {}
        for _, op, _ in part:
            ops[op] = ops.get(op, 0) + 1
        return ", ".join(f"{k} {v}" for k, v in sorted(ops.items(), key=lambda x: -x[1])[:12])

    line = "; ".join(info[-2:]) + f"; {function}: {len(code)} instructions ({mix(code)})"
    # Loops: a branch back to an earlier address; the body is what runs per trip.
    for at, op, text in code:
        m = re.search(r"BRA\s+(?:`\(\.L_x_\d+\)\s*)?(0x[0-9a-f]+)", text) if op == "BRA" else None
        target = int(m.group(1), 16) if m else None
        if target is not None and target < at:
            body = [c for c in code if target <= c[0] <= at]
            if len(body) >= 16:
                line += f"\n  loop {target:#x}..{at:#x}: {len(body)} instructions ({mix(body)})"
    return line
