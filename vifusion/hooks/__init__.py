"""Signed webhooks: a registered URL is sent ``job.ready``, ``job.failed`` and
``video.deleted`` events (for one collection or all), each signed with the hook's secret.

Events are written to the catalog's outbox in the transaction of the change they tell of
(vifusion/catalog/_outbox.py); ``events.register`` adds a hook under ingest's URL rules;
``delivery.Deliverer`` sends them, with retries for a day, at least once; ``_sign.py`` is the
signature a receiver checks.
"""

from vifusion.catalog import HOOK_EVENTS
from vifusion.hooks._sign import signature, verify

__all__ = ["HOOK_EVENTS", "signature", "verify"]
