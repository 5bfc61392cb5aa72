"""The recording room: the event stream becomes the Job and Attempt rows, and rows past their
retention go.

- ``recorder``: the loop (read a batch, fold it, write it, acknowledge it; reading, folding and
  writing overlap), the streams' leases, backing off while Redis or the database is away.
- ``fold``: how a batch of events changes the rows it touches, in memory (no database, no
  Redis), one handler per event type.
- ``rows``: a Job or Attempt row as plain values, and as its columns hold them.
- ``writer``: loads the rows a fold needs and writes back what it changed (COPY on PostgreSQL).
- ``dead_letters``: the other writes of Job rows, a dead letter's replay and purge.
- ``pruner``: deletes the recorded jobs past ``fairqueue_record_retention``.

Every write of a Job or Attempt row is here. ``manage.py fairqueue_recorder``, the worker's
recorder step (``worker.py``) and the ``prune_records`` task run it.

May import: the app's models, columns and conf, the package outside contrib (the store, the
event protocol, settings); nothing of the console or the admin.
"""

from .dead_letters import record_purge, record_replay

__all__ = ["record_purge", "record_replay"]
