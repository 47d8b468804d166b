"""What crosses a link: a fused batch with its features encoded."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from vifusion.comm.codec import Encoded, Ladder
from vifusion.types import FusedBatch


@dataclass
class WireBatch:
    """A fused batch as it crosses a link: ids and times as they are, features encoded."""

    ids: np.ndarray
    times: np.ndarray
    payload: Encoded
    batch_id: str
    tables: Any = None  # ObjectRef of the SharedTables the codec needs (pq, sparse)

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def nbytes(self) -> int:
        return self.ids.nbytes + self.times.nbytes + self.payload.nbytes

    def decode(self, ladder: Ladder) -> FusedBatch:
        return FusedBatch(self.ids, self.times, ladder.decode(self.payload), self.batch_id)
