"""Celery apps that tests start real workers for (``celery -A tests.apps.<name> worker``).

Their tasks are not shared (``@app.task(shared=False, ...)``): Celery registers a shared task
with every app finalized after its module was imported, so an app's tasks (the admin's key
forms, a key search by a task's short name) would depend on which apps the tests that ran
before, in the same process, imported: one order in a serial run, another in each xdist worker.
"""
