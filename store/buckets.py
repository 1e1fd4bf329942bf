"""Bucket-major flat arrays: the layout both tiers of a :class:`~gpulens.store.ring.Ring` are made of.

A tier holds ``slots`` buckets of ``n`` values each, one bucket's values
adjacent (bucket-major), bucket ``b`` in slot ``b % slots``. These read one
column of a range of buckets (at most one lap round the slots), add it up, and
clear a range of buckets, each as a few slice operations done in C.
"""

from __future__ import annotations

from array import array
from typing import TypeVar

Arr = TypeVar("Arr", "array[float]", "array[int]")


def column(arr: array[float] | array[int], n: int, m: int, lo: int, hi: int) -> list[float]:
    """Column ``m`` of buckets ``lo..hi`` (inclusive, at most one lap) of a bucket-major array."""
    slots = len(arr) // n
    i0, i1 = lo % slots, hi % slots
    if i0 <= i1 and hi - lo < slots:
        return list(arr[i0 * n + m : i1 * n + m + 1 : n])
    return list(arr[i0 * n + m :: n]) + list(arr[m : i1 * n + m + 1 : n])


def column_sum(arr: array[float] | array[int], n: int, m: int, lo: int, hi: int) -> float:
    """Sum of :func:`column`, added up per lap in slot order."""
    slots = len(arr) // n
    i0, i1 = lo % slots, hi % slots
    if i0 <= i1 and hi - lo < slots:
        return float(sum(arr[i0 * n + m : i1 * n + m + 1 : n]))
    return float(sum(arr[i0 * n + m :: n]) + sum(arr[m : i1 * n + m + 1 : n]))


def fill(arr: Arr, n: int, slots: int, lo: int, hi: int, row: Arr) -> None:
    """Set buckets ``lo..hi`` (inclusive) of a bucket-major array to ``row`` (``n`` values)."""
    count = hi - lo + 1
    if count <= 0:
        return
    if count >= slots:
        arr[:] = row * slots
        return
    i0, i1 = lo % slots, hi % slots
    if i0 <= i1:
        arr[i0 * n : (i1 + 1) * n] = row * count
    else:
        arr[i0 * n :] = row * (slots - i0)
        arr[: (i1 + 1) * n] = row * (i1 + 1)
