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


def block_csr_from_weight(weight: np.ndarray, block: int) -> dict[str, np.ndarray]:
    """CSR over vectors of `block` output channels (the vector layouts' form).

    Rows are blocks of `block` consecutive output channels of the (O, rest) matrix; a row
    stores every column where any of its channels has a non-zero, as a vector of `block`
    weights (zeros included): `csr_data` is (nnz, block). A kernel then does one vector
    FMA per stored column and output pixel, as the dense micro-kernel does, and skips
    columns the whole block pruned. The same keep-every-row-non-empty rule applies.
    """
    matrix = weight.reshape(weight.shape[0], -1)
    rows = matrix.shape[0] // block
    blocks = matrix.reshape(rows, block, matrix.shape[1]).transpose(0, 2, 1)  # (R, K, b)
    mask = (blocks != 0).any(axis=2)
    mask[~mask.any(axis=1), 0] = True
    indptr = np.concatenate([[0], np.cumsum(mask.sum(axis=1))]).astype(np.int32)
    indices = np.nonzero(mask)[1].astype(np.int32)
    return {DATA: np.ascontiguousarray(blocks[mask]), INDICES: indices, INDPTR: indptr}


def csr_to_dense(arrays: dict[str, np.ndarray], shape: tuple[int, ...]) -> np.ndarray:
    """The weight back from its CSR arrays (for tests and debugging)."""
    data = arrays[DATA]
    block = data.shape[1] if data.ndim == 2 else 1  # block-CSR: one row per `block` channels
    indptr = arrays[INDPTR]
    matrix = np.zeros((shape[0] // block, int(np.prod(shape[1:])), block), dtype=data.dtype)
    for r in range(len(indptr) - 1):
        lo, hi = indptr[r], indptr[r + 1]
        matrix[r, arrays[INDICES][lo:hi]] = data[lo:hi].reshape(hi - lo, block)
    return matrix.transpose(0, 2, 1).reshape(shape)


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
