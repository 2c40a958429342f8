"""Running compiled models and timing them with the DLAS paper's method."""

from .vm_timing import load_vm, num_threads_in_use, run_batch, set_num_threads, time_vm

__all__ = ["load_vm", "num_threads_in_use", "run_batch", "set_num_threads", "time_vm"]
