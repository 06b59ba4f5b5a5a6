"""CPU and wall cost of each NVML call the power sampler makes, via ctypes (no pynvml needed).

Usage: python3 bench/nvml_cost.py [N]   (N calls of each; default 200)
"""
import ctypes, sys, time

N = int(sys.argv[1]) if len(sys.argv) > 1 else 200
nv = ctypes.CDLL("libnvidia-ml.so.1")
assert nv.nvmlInit_v2() == 0
h = ctypes.c_void_p()
assert nv.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h)) == 0
u = ctypes.c_uint()
ull = ctypes.c_ulonglong()


class Util(ctypes.Structure):
    _fields_ = [("gpu", ctypes.c_uint), ("memory", ctypes.c_uint)]


class FieldValue(ctypes.Structure):
    _fields_ = [("fieldId", ctypes.c_uint), ("scopeId", ctypes.c_uint), ("timestamp", ctypes.c_longlong),
                ("latencyUsec", ctypes.c_longlong), ("valueType", ctypes.c_uint), ("nvmlReturn", ctypes.c_uint),
                ("value", ctypes.c_ulonglong)]


util = Util()
fv = (FieldValue * 1)()
calls = {
    "GetHandleByIndex_v2": lambda: nv.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h)),
    "GetPowerUsage": lambda: nv.nvmlDeviceGetPowerUsage(h, ctypes.byref(u)),
    "GetTotalEnergyConsumption": lambda: nv.nvmlDeviceGetTotalEnergyConsumption(h, ctypes.byref(ull)),
    "GetFieldValues(POWER_INSTANT=186)": lambda: (setattr(fv[0], "fieldId", 186), nv.nvmlDeviceGetFieldValues(h, 1, fv))[1],
    "GetTemperature": lambda: nv.nvmlDeviceGetTemperature(h, 0, ctypes.byref(u)),
    "GetClockInfo(SM)": lambda: nv.nvmlDeviceGetClockInfo(h, 1, ctypes.byref(u)),
    "GetUtilizationRates": lambda: nv.nvmlDeviceGetUtilizationRates(h, ctypes.byref(util)),
}
for name, f in calls.items():
    rc = f()
    c0, w0 = time.thread_time(), time.perf_counter()
    for _ in range(N):
        f()
    c1, w1 = time.thread_time(), time.perf_counter()
    print(f"{name:36} rc={rc} cpu {((c1 - c0) / N) * 1e6:8.1f} us/call  wall {((w1 - w0) / N) * 1e6:8.1f} us/call")
# Energy counter update period: distinct values over 2 s.
vals, t0 = [], time.perf_counter()
while time.perf_counter() - t0 < 2.0:
    nv.nvmlDeviceGetTotalEnergyConsumption(h, ctypes.byref(ull))
    if not vals or vals[-1][1] != ull.value:
        vals.append((time.perf_counter() - t0, ull.value))
    time.sleep(0.002)
print(f"energy counter: {len(vals)} distinct values in 2 s")
