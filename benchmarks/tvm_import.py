"""`import tvm` in a fresh process, plain against dlas's wrapper (dlas/_compat/tvm_import.py).

Every dlas process (the run, compile helpers, timing workers, the tests' subprocesses)
imports TVM. TVM's import probes for things this build lacks, and the first C++ error of
a process makes libbacktrace read every loaded library's symbol and debug tables. dlas
answers those probes in Python. This times both, alternating, each in a new interpreter
(the way a worker meets it), and prints the medians, their spread and the ratio:

    python benchmarks/tvm_import.py [--rounds 8]

Run on an otherwise idle machine (about a minute on 2 cores).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

#: What each process runs: the import of `tvm`, timed inside the process.
PLAIN = "import time; t = time.perf_counter(); import tvm; print(time.perf_counter() - t)"
WRAPPED = ("import time; t = time.perf_counter(); import dlas, tvm; "
           "print(time.perf_counter() - t)")


def _seconds(code: str) -> float:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=300)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8,
                        help="alternating pairs of fresh processes (default 8)")
    args = parser.parse_args()
    _seconds(PLAIN)  # warm the page cache for both sides alike
    plain: list[float] = []
    wrapped: list[float] = []
    for _ in range(args.rounds):
        plain.append(_seconds(PLAIN))
        wrapped.append(_seconds(WRAPPED))
    from dlas.results.drift_record import this_machine  # after the timed processes

    print(f"machine: {this_machine()}; {args.rounds} alternating pairs of fresh processes")
    print(f"{'import':24s} {'median s':>9s} {'min':>7s} {'max':>7s}")
    for name, times in (("import tvm", plain), ("import dlas, tvm", wrapped)):
        print(f"{name:24s} {statistics.median(times):9.3f} {min(times):7.3f} "
              f"{max(times):7.3f}")
    ratios = sorted(w / p for w, p in zip(wrapped, plain, strict=True))
    print(f"wrapped / plain: median x{statistics.median(ratios):.2f} "
          f"(pairs x{ratios[0]:.2f}-x{ratios[-1]:.2f}); saved per process "
          f"{statistics.median(plain) - statistics.median(wrapped):.2f} s")


if __name__ == "__main__":
    main()
