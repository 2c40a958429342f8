"""TIR-level pieces shared by the algorithms (layer 4) and the compiler (layer 5).

This package sits below both: it imports neither `dlas.algorithms` nor `dlas.compiler`,
so an algorithm's schedule and the compiler's minimal-schedule pass can share block and
loop helpers, and the conv annotation that links them, without importing each other.

* `conv_spec`: `ConvSpec` (one conv2d's shapes and dtypes) and the block annotations
  that mark a block as an algorithm-made conv.
* `schedule_helpers`: block/loop queries and the two moves an untuned schedule makes
  (thread-parallel outer loops, trivially legal vectorization).
"""
