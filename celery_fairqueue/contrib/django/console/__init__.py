"""The console room: what the support console and the admin read and do, from the recorded
jobs (the database) and the fair store (Redis), and the pages that join the two.

- ``account_views``: the accounts overview and one page per account (the admin serves them).
- ``overview``: the overview's rows and pages, from the Job table.
- ``history``: an account's recorded history per queue, its recent jobs, throughput.
- ``queries``: the query API over recorded state, for code and alerting.
- ``live``: what the fair store says now of a page's accounts.
- ``actions``: an operator's actions on an account (pause, resume, limit, cancel, run now).
- ``views``: dead letters replayed and purged with the operator's permissions.
- ``charts``: the throughput chart; ``formatting``: how a page shows a value.

May import: the app's models, columns and conf, the recording room's dead letters (a replay
and a purge write their rows there), the package outside contrib; nothing of the admin (which
imports this room) and nothing of the recorder.
"""
