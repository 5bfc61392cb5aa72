"""The worker side: a consumer bootstep that claims fair jobs for free pool slots.

- ``step.py``: the consumer bootstep ``install`` adds; it starts the dispatcher.
- ``dispatcher.py``: claims fair jobs for free slots (one ``claim`` call, its acks riding
  along) and hands them to Celery's own task handler; the decisions are the store's.
- ``layout_gate.py``: whether the store's layout lets the worker claim yet (an upgrade to
  come, or jobs of a layout this version does not read).
- ``doorbell.py``: how an idle worker waits for work (one ring wakes one worker) and who keeps
  a queue's time.
- ``channel.py``: a lease as the kombu message Celery receives; its ack, reject and requeue
  settle the lease.
- ``request.py``: the request class of fair tasks (Celery's own, minus the eta wait).
- ``strategy.py``: Celery's default task strategy, plus adopting fair messages that reached the
  broker.
- ``control.py``: ``celery inspect scheduled`` and ``query_task`` answered for the store too.
- ``redacted.py``: events, backend errors and ``inspect`` listings with redacted values masked.
- ``outage.py``: one log line when the store starts failing, one when it answers again.
"""
