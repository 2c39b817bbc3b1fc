#!/usr/bin/env python3
"""peak_heap.py COMMAND...: runs COMMAND (stdout dropped) and prints on
stderr its time, exit code, peak anonymous memory (heap) and peak resident
size, sampled from /proc/PID/status every 10 ms. Resident size counts
mapped input files; anonymous memory is what the process allocated.
"""
import subprocess
import sys
import time

p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)
peak_anon = peak_rss = 0
t0 = time.time()
while p.poll() is None:
    try:
        with open(f"/proc/{p.pid}/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    peak_anon = max(peak_anon, int(line.split()[1]))
                elif line.startswith("VmRSS:"):
                    peak_rss = max(peak_rss, int(line.split()[1]))
    except FileNotFoundError:
        pass
    time.sleep(0.01)
print(
    f"{time.time() - t0:.2f} s  rc={p.returncode}  peak anon {peak_anon // 1024} MiB  peak rss {peak_rss // 1024} MiB",
    file=sys.stderr,
)
sys.exit(p.returncode)
