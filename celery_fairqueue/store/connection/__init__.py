"""The connection to Redis: the one door every command of the store goes through.

- ``connect.py``: the client for a URL (one Redis, Sentinel in ``sentinel.py``, a Redis
  Cluster in ``cluster.py``); ``client.py`` is the one-server client.
- ``translate.py``: where every Redis failure (a dropped connection, a timeout, an error reply
  such as OOM, BUSY or READONLY) becomes the package's ``StoreUnavailableError``.
- ``lua.py``: builds each script of ``scripts/`` from the library files it includes.
- ``door.py``: ``StoreDoor``, the client, keys, settings and scripts every role calls through.
- ``deadline.py``: a producer's deadline on Redis's clock (an enqueue that raised stored nothing).

May import: formats.
"""
