"""The Django app of celery-fairqueue: job state, dead letters and account limits as data.

Add ``"celery_fairqueue.contrib.django"`` to ``INSTALLED_APPS``.
"""
