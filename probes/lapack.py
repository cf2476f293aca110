"""The LAPACK calls of the ridge solves that numpy lacks, made without holding the GIL.

    reduced = Tridiagonal.of(A)              # A = Q T Q' for a symmetric A (dsytrd): no eigenvectors formed
    reduced.rotate(B)                        # Q' B (dormtr)
    reduced.unrotate(B)                      # Q B
    reduced.solve_shifted(shift, B)          # (T + shift I)⁻¹ B (dptsv): O(p) per column
    solve_positive_definite(A, B, shift)     # (A + shift I)⁻¹ B by Cholesky (dposv)

Why: ``probes.gram.primal_solutions`` needs (A + alpha I)⁻¹ B for every alpha of a grid. Since
A + alpha I = Q (T + alpha I) Q', the tridiagonal form gives every alpha at the cost of the first stage of an
eigendecomposition (the reduction, about a third of numpy's ``eigh`` at width 768), without the divide and
conquer and the back-transformation of the eigenvectors. numpy.linalg offers neither dsytrd nor dormtr, and
scipy.linalg.lapack's wrappers hold the GIL for the whole call, so the solves ``probes.grid.solve_each`` runs
side by side would take turns. scipy.linalg.cython_lapack publishes the same routines as ``nogil`` C function
pointers (its documented Cython API, LP64 ``int``); called through ctypes they run without the GIL, as numpy's
own linalg does, on scipy's BLAS (limited with numpy's by ``probes.grid.one_blas_thread``).

Every matrix is handed to LAPACK in Fortran (column) order. A shifted matrix that is not numerically positive
definite raises ``np.linalg.LinAlgError``; the caller decides what to do then.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from functools import cache

import numpy as np
from scipy.linalg import cython_lapack

_CHAR, _INT, _ARRAY = ctypes.c_char_p, ctypes.POINTER(ctypes.c_int), ctypes.c_void_p
_SIGNATURES = {  # the arguments of each routine, as scipy.linalg.cython_lapack declares them
    "dsytrd": (_CHAR, _INT, _ARRAY, _INT, _ARRAY, _ARRAY, _ARRAY, _ARRAY, _INT, _INT),
    "dormtr": (_CHAR, _CHAR, _CHAR, _INT, _INT, _ARRAY, _INT, _ARRAY, _ARRAY, _INT, _ARRAY, _INT, _INT),
    "dptsv": (_INT, _INT, _ARRAY, _ARRAY, _ARRAY, _INT, _INT),
    "dposv": (_CHAR, _INT, _INT, _ARRAY, _INT, _ARRAY, _INT, _INT),
}


# the C API that opens a capsule, as private prototypes (ctypes.pythonapi's shared attributes stay untouched)
_capsule_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(("PyCapsule_GetName", ctypes.pythonapi))
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))


@cache
def _routine(name: str):
    """The routine ``name`` of scipy.linalg.cython_lapack as a ctypes function (CFUNCTYPE: it lets go of the GIL)."""
    capsule = cython_lapack.__pyx_capi__[name]
    return ctypes.CFUNCTYPE(None, *_SIGNATURES[name])(_capsule_pointer(capsule, _capsule_name(capsule)))


def _call(name: str, *args) -> int:
    """Call LAPACK's ``name`` with ``args`` (bytes for characters, ints, Fortran-ordered float64 arrays), its
    ``info`` argument added last; returns ``info`` (negative: a bad argument, which is a bug here)."""
    info = ctypes.c_int(0)
    converted = [ctypes.byref(ctypes.c_int(a)) if isinstance(a, int) else a.ctypes.data if isinstance(a, np.ndarray)
                 else a for a in args]
    _routine(name)(*converted, ctypes.byref(info))
    if info.value < 0:
        raise ValueError(f"LAPACK {name}: argument {-info.value} is invalid")
    return info.value


def _workspace(name: str, *args) -> np.ndarray:
    """The work array LAPACK's ``name`` asks for (a query with lwork = -1; ``args`` as the call's, up to ``work``)."""
    size = np.zeros(1)
    _call(name, *args, size, -1)
    return np.empty(max(1, int(size[0])))


def _fortran(values: np.ndarray) -> np.ndarray:
    """A float64 Fortran-ordered copy of ``values`` that LAPACK may overwrite."""
    return np.array(values, dtype=np.float64, order="F", copy=True)


@dataclass
class Tridiagonal:
    """A symmetric matrix A as Q T Q': T tridiagonal (``diagonal``, ``off_diagonal``), Q kept as LAPACK's
    Householder reflectors (``reflectors``, ``tau``) and applied, never formed."""

    reflectors: np.ndarray  # (p, p) Fortran order: dsytrd's output (the reflectors below the diagonal)
    tau: np.ndarray  # (p - 1,)
    diagonal: np.ndarray  # (p,)
    off_diagonal: np.ndarray  # (p - 1,)

    @classmethod
    def of(cls, matrix: np.ndarray) -> "Tridiagonal":
        """The reduction of the symmetric ``matrix`` (its lower triangle is read; it is not modified)."""
        p = len(matrix)
        a, diagonal = _fortran(matrix), np.empty(p)
        off_diagonal, tau = np.empty(max(p - 1, 1)), np.empty(max(p - 1, 1))
        head = (b"L", p, a, max(p, 1), diagonal, off_diagonal, tau)
        work = _workspace("dsytrd", *head)
        _call("dsytrd", *head, work, len(work))
        return cls(a, tau[:p - 1], diagonal, off_diagonal[:p - 1])

    def rotate(self, values: np.ndarray) -> np.ndarray:
        """Q' values, for ``values`` (p, m)."""
        return self._apply(values, b"T")

    def unrotate(self, values: np.ndarray) -> np.ndarray:
        """Q values, for ``values`` (p, m)."""
        return self._apply(values, b"N")

    def _apply(self, values: np.ndarray, transpose: bytes) -> np.ndarray:
        out = _fortran(values)
        p, m = out.shape
        if p > 1 and m:
            tau = np.concatenate([self.tau, [0.0]])  # dormtr reads tau as (p - 1,): never empty
            head = (b"L", b"L", transpose, p, m, self.reflectors, p, tau, out, p)
            work = _workspace("dormtr", *head)
            _call("dormtr", *head, work, len(work))
        return out

    def solve_shifted(self, shift: float, values: np.ndarray) -> np.ndarray:
        """(T + shift I)⁻¹ values, for ``values`` (p, m), by T + shift I = L D L' (dptsv: no pivoting, stable for a
        positive definite matrix). Raises np.linalg.LinAlgError where T + shift I is not positive definite."""
        diagonal, off_diagonal, out = self.diagonal + shift, self.off_diagonal.copy(), _fortran(values)
        p, m = out.shape
        if p and m and _call("dptsv", p, m, diagonal, off_diagonal if len(off_diagonal) else np.zeros(1), out, p):
            raise np.linalg.LinAlgError(f"the shifted tridiagonal matrix (shift {shift:g}) is not positive definite")
        return out


def solve_positive_definite(matrix: np.ndarray, values: np.ndarray, shift: float = 0.0) -> np.ndarray:
    """(matrix + shift I)⁻¹ values for a symmetric ``matrix`` (p, p; its lower triangle is read, it is not
    modified) and ``values`` (p, m), by Cholesky (dposv). Raises np.linalg.LinAlgError where matrix + shift I is
    not numerically positive definite."""
    a, out = _fortran(matrix), _fortran(values)
    a[np.diag_indices_from(a)] += shift
    p, m = out.shape
    if p and m and _call("dposv", b"L", p, m, a, max(p, 1), out, max(p, 1)):
        raise np.linalg.LinAlgError(f"the matrix (shift {shift:g}) is not positive definite")
    return out
