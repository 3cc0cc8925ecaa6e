"""Running the user's ``ProducerInterceptor`` hooks (the Java client's ``ProducerInterceptors``).

``on_send`` runs in ``send()`` before serialization and may replace the record;
``on_acknowledgement`` runs once per record when its batch ends. An exception a hook raises
is logged and otherwise ignored, as in the Java client: a buggy interceptor must not lose or
block records.
"""

from __future__ import annotations

from collections.abc import Sequence

from aiokprod.internals.batch import ProducerBatch
from aiokprod.logs import get_logger
from aiokprod.types import ProducerInterceptor, ProducerRecord

log = get_logger("aiokprod.producer")


def on_send(interceptors: Sequence[ProducerInterceptor], record: ProducerRecord) -> ProducerRecord:
    """Pass ``record`` through every interceptor's ``on_send``, in order."""
    for interceptor in interceptors:
        try:
            changed = interceptor.on_send(record)
            if isinstance(changed, ProducerRecord):
                record = changed
        except Exception:
            log.exception("interceptor on_send raised", interceptor=repr(interceptor))
    return record


def on_acknowledgement(interceptors: Sequence[ProducerInterceptor], batch: ProducerBatch) -> None:
    """Tell every interceptor how each record of the ended ``batch`` ended."""
    handles = batch.handles
    if not handles or not interceptors:
        return
    for handle in handles:
        error = handle.exception()
        metadata = None if error is not None else handle.result()
        for interceptor in interceptors:
            try:
                interceptor.on_acknowledgement(metadata, error)
            except Exception:
                log.exception("interceptor on_acknowledgement raised")
