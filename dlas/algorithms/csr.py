"""The CSR data format of a conv weight, built once at compile time (numpy).

The OIHW weight is reshaped to the (O, Cg*KH*KW) matrix a GEMM would multiply, and its
non-zeros stored row by row: `csr_data` (values), `csr_indices` (column of each value)
and `csr_indptr` (row r owns entries indptr[r] .. indptr[r+1]). A CSR kernel loops over
exactly a row's entries, so a pruned weight costs nothing.

Two deliberate details:

* Every row keeps at least one entry (an explicit zero in column 0 when the whole filter
  was pruned). The kernels are TIR reductions whose zero-initialisation runs at the first
  entry; an empty row would leave its output uninitialised. One multiply-add per pruned
  filter and output pixel is the price.
* Indices are int32 (a conv row has far fewer than 2**31 columns).
"""

from __future__ import annotations

import numpy as np

DATA, INDICES, INDPTR = "csr_data", "csr_indices", "csr_indptr"


def csr_from_weight(weight: np.ndarray) -> dict[str, np.ndarray]:
    """CSR arrays of `weight` (O, ...) viewed as an (O, rest) matrix."""
    matrix = weight.reshape(weight.shape[0], -1)
    mask = matrix != 0
    empty = ~mask.any(axis=1)
    mask[empty, 0] = True  # a stored zero keeps every row non-empty (see module docstring)
    counts = mask.sum(axis=1)
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    indices = np.nonzero(mask)[1].astype(np.int32)
    data = np.ascontiguousarray(matrix[mask])
    return {DATA: data, INDICES: indices, INDPTR: indptr}


def csr_to_dense(arrays: dict[str, np.ndarray], shape: tuple[int, ...]) -> np.ndarray:
    """The weight back from its CSR arrays (for tests and debugging)."""
    rows = shape[0]
    matrix = np.zeros((rows, int(np.prod(shape[1:]))), dtype=arrays[DATA].dtype)
    indptr = arrays[INDPTR]
    for r in range(rows):
        lo, hi = indptr[r], indptr[r + 1]
        matrix[r, arrays[INDICES][lo:hi]] = arrays[DATA][lo:hi]
    return matrix.reshape(shape)


class CSRFormat:
    """Mixin of the CSR algorithms: weights become CSR constants at compile time.

    A conv whose weight is not a compile-time constant cannot be stored as CSR; the
    compiler then records a fallback (see `ConvAlgorithm.needs_weight_value`).
    """

    needs_weight_value = True

    def weight_constants(self, spec, weight_value: np.ndarray | None) -> dict[str, np.ndarray]:
        if weight_value is None:
            raise ValueError("CSR needs the weight's value at compile time")
        return csr_from_weight(weight_value)
