"""Running compiled models and timing them with the DLAS paper's method.

The package imports nothing itself: the placement probe and the load probe are used by
commands that never run TVM (`dlas results`, `dlas --help`), and `vm_timing` pulls in
TVM (5 s here). Import the module you need (`dlas.measure.vm_timing`, ...).
"""
