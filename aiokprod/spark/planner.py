"""Where the batches of a run of encoded records begin and end (for spark/encoder.py).

A record's size is known up to the length of its offset delta's varint (1 byte for deltas
below 64, 2 below 8,192, ...), so the batch boundaries follow from prefix sums of the sizes
per delta class, one or two ``searchsorted`` per batch, by the rule
:meth:`~aiokprod.protocol.records.RecordBatchBuilder.try_append` applies: a record fits if
the batch stays within ``batch_size``; the first one always fits. (The prefix sums are
computed with numpy and searched with ``bisect`` in an ``array``: a Python ``int`` per
probe, none per record.) A batch also ends at a
*break* (where a keyed column's next partition begins): its records never share a batch
with the records before it. And a run of records may begin by *continuing* a batch that is
open already (a partition's half-full batch): that batch holds records and bytes, and its
records' offset deltas and timestamp delta go on from there.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from typing import Any, Final

import numpy as np

from aiokprod.protocol.records import BATCH_HEADER_SIZE

__all__ = ["Planner", "varint_len"]

#: Offset delta d takes a varint of zigzag(d) = 2d: one byte below 64, two below 8,192, ...
DELTA_CLASSES: Final = ((1, 64), (64, 1 << 13), (1 << 13, 1 << 20), (1 << 20, 1 << 27))


def varint_len(zigzagged: Any) -> Any:
    """Bytes of the varint of each (non-negative) value."""
    z = np.asarray(zigzagged)
    return (
        1
        + (z >= 1 << 7).astype(np.int64)
        + (z >= 1 << 14)
        + (z >= 1 << 21)
        + (z >= 1 << 28)
        + (z >= 1 << 35)
    )


def _width(delta: int) -> int:
    """Bytes of the varint of offset delta ``delta``."""
    return 1 if delta < 64 else 2 if delta < 1 << 13 else 3 if delta < 1 << 20 else 4


class Planner:
    """Batch boundaries of records whose sizes depend on their offset delta's class.

    Args:
        base: each record's size without its offset delta and length varints (and with a
            timestamp delta of one byte).
        size_limit: the batch's byte budget (``batch_size``).
        breaks: indexes (ascending, within ``base``) where a batch must begin.
        opens: index -> ``(records, size, extra)``: the records from that index (one where
            a batch begins: the first, or a break) continue an open batch holding
            ``records`` records in ``size`` bytes, each taking ``extra`` more bytes there
            (a longer timestamp delta).
    """

    def __init__(
        self,
        base: Any,
        size_limit: int,
        breaks: list[int] | None = None,
        opens: dict[int, tuple[int, int, int]] | None = None,
    ) -> None:
        self._base = base
        self._limit = size_limit
        self._m = len(base)
        self._breaks = breaks or []
        self._opens = opens or {}
        #: The planned batches that continue an open batch (indexes into ``firsts``).
        self.continued: list[int] = []
        #: Per delta class (the offset delta varint's length): prefix sums of record sizes.
        self._sums: dict[int, array[int]] = {}

    def sums(self, width: int) -> array[int]:
        """Prefix sums (from 0) of the record sizes when the offset delta takes ``width``."""
        sums = self._sums.get(width)
        if sums is None:
            body = self._base + width
            out = np.zeros(self._m + 1, np.int64)
            np.cumsum(varint_len(body * 2) + body, out=out[1:])
            sums = self._sums[width] = array("q", out.tobytes())
        return sums

    def sizes(self, width: int, indexes: list[int]) -> list[int]:
        """The sizes of the records at ``indexes`` when the offset delta takes ``width``."""
        sums = self.sums(width)
        return [sums[i + 1] - sums[i] for i in indexes]

    def _continue(self, s: int, segment_end: int) -> tuple[int, int]:
        """The records from ``s`` that fit the open batch they continue, and the next's size.

        Returns the end of the batch's records, and the size of the record after them in
        the batch (-1: none follows before ``segment_end``).
        """
        count, used, extra = self._opens[s]
        # no more than the room allows at 7 bytes a record (the least one takes), plus one
        most = min(segment_end - s, max(self._limit - used, 0) // 7 + 1)
        bodies = self._base[s : s + most] + extra
        bodies = bodies + varint_len(2 * (count + np.arange(most)))
        sizes = varint_len(bodies * 2) + bodies
        fit = int(np.searchsorted(np.cumsum(sizes), self._limit - used, "right"))
        return s + fit, int(sizes[fit]) if fit < most else -1

    def plan(self, window_cut: bool) -> tuple[list[int], list[int]]:
        """``firsts`` (with the end as the last entry) and each batch's ``next_size``.

        ``next_size`` is -1 for a batch followed by a break or the end (nothing follows it
        in its batch's partition); with ``window_cut`` the last batch, which the window may
        have cut short, is left to the next plan. A batch that continues an open one is
        listed in :attr:`continued` (it may hold no records: the next did not fit).
        """
        m = self._m
        limit = self._limit
        firsts: list[int] = []
        next_sizes: list[int] = []
        ends = iter([*self._breaks, m])
        segment_end = 0
        first_sums = self.sums(1)
        opens = self._opens
        s = 0
        while s < m:
            while segment_end <= s:
                segment_end = next(ends)
            if s in opens and (not firsts or firsts[-1] != s):
                end, next_size = self._continue(s, segment_end)
                self.continued.append(len(firsts))
                firsts.append(s)
                next_sizes.append(next_size)
                s = end
                continue
            used = BATCH_HEADER_SIZE + first_sums[s + 1] - first_sums[s]  # always fits
            end = s + 1
            if used < limit:
                for width, (low, high) in enumerate(DELTA_CLASSES, start=1):
                    lo = s + low
                    if end != lo or lo >= segment_end:
                        break
                    hi = min(s + high, segment_end)
                    sums = self.sums(width)
                    # the most records from lo on that keep the batch within the limit
                    end = bisect_right(sums, limit - used + sums[lo], lo, hi + 1) - 1
                    used += sums[end] - sums[lo]
                    if end < hi:
                        break
            if end < segment_end:  # the record that did not fit: its size in this batch
                sums = self.sums(_width(end - s))
                next_sizes.append(sums[end + 1] - sums[end])
            else:
                next_sizes.append(-1)
            firsts.append(s)
            s = end
        if window_cut and len(firsts) > 1 and next_sizes[-1] < 0:
            # The window cut the last batch short: the next plan starts at its first record.
            s = firsts.pop()
            next_sizes.pop()
            if self.continued and self.continued[-1] == len(firsts):
                self.continued.pop()
        firsts.append(s)
        return firsts, next_sizes
