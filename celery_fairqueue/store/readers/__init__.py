"""What reads the whole store for people and processes: facts, not sentences.

- ``views.py``: queue totals, deferred and paused accounts, accounts (``StoreInspector``).
- ``console.py``: why an account waits and until when, live workers, the oldest waiting job.
- ``heads.py``: since when each account of a queue waits (the head of its FIFO).
- ``events.py``: the event stream the recorder reads, and the recorders' lock.
- ``dead_letters.py``: the dead-letter queue, listed, shown, replayed and purged;
  ``letter_names.py``: what a person calls a dead letter, resolved to its ids.
- ``doorbell.py``: an idle worker's wait on its queues' doorbells.

May import: formats, connection, writers, shards.
"""
