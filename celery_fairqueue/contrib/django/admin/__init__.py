"""The admin: accounts (the support console: an overview and a page per account), jobs and
their attempts (read-only), dead letters with replay and purge, account limits and queues'
shared limits.

Browsing jobs reads only the database, so those pages work while Redis is down; the account
pages add what the fair store says now, and every action needs the store and its own
permission.
"""

from .accounts import AccountAdmin
from .jobs import DeadJobAdmin, JobAdmin
from .limits import AccountLimitAdmin, AccountLimitForm, QueueLimitAdmin, store_unreachable

__all__ = ["AccountAdmin", "AccountLimitAdmin", "AccountLimitForm", "DeadJobAdmin", "JobAdmin",
           "QueueLimitAdmin", "store_unreachable"]
