"""``fairqueue limits`` in both CLIs, and limits in words: an account's own, the store's
default, a queue's shared limit and its default for accounts, an account's limit in one queue.
The admin and the console say a limit with the same :func:`limit_text`."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from typing import Any

from celery import Celery

from .errors import InvalidLimitError
from .install import (
    clear_account_limit,
    clear_default_limit,
    clear_queue_limit,
    set_account_limit,
    set_default_limit,
    set_queue_limit,
)
from .limits import AccountLimit
from .store import store_for
from .tables import render

#: The options a queue's shared limit takes (set_queue_limit).
QUEUE_LIMIT_OPTIONS = ("rate", "burst", "concurrency")


def limit_text(limit: AccountLimit | None) -> str:
    """An account's own limit in a few words; "default" when it has none."""
    if limit is None:
        return "default"
    parts = []
    if limit.rate:
        parts.append(limit.rate + (f" burst {limit.burst:g}" if limit.burst else ""))
    if limit.concurrency:
        parts.append(f"{limit.concurrency} at once")
    if limit.window:
        parts.append(f"{limit.window} {limit.tz or 'UTC'}")
    if limit.weight != 1:
        parts.append(f"weight {limit.weight}")
    return ", ".join(parts) or "none"


def default_limit_text(limit: AccountLimit | None) -> str:
    """The store's default limit, which every worker applies to accounts without their own."""
    if limit is None:
        return "Default limit: none stored yet (the first worker stores its settings')"
    return f"Default limit: {limit_text(limit)} (change it with `fairqueue limits --default`)"


def limits_command(app: Celery, *, set_default: bool, account: str | None, clear: bool,
                   given: Mapping[str, Any], queue: str | None = None) -> str:
    """What `fairqueue limits` does in both CLIs: set (or with ``clear``, drop) the store's
    default limit, an account's own limit, or with ``queue`` the queue's shared limit, its
    default for accounts or an account's limit in it (rate, burst, concurrency, window, tz,
    weight: those ``given`` that are not None); or list them. Returns the text to print above
    the default limit's line; raises InvalidLimitError (usage errors too) with the reason."""
    options = {name: value for name, value in given.items() if value is not None}
    store = store_for(app)
    if set_default and account is not None:
        raise InvalidLimitError("--default sets a default limit: no --account")
    if set_default:
        if clear and queue is None:
            raise InvalidLimitError("--default --clear drops a queue's default: add --queue")
        if clear:
            clear_default_limit(app, queue=str(queue))
        else:
            set_default_limit(app, queue=queue, **options)
        return "" if queue is None else queue_limits_text(store, queue)
    if account is None and queue is not None:
        if extra := sorted(set(options) - set(QUEUE_LIMIT_OPTIONS)):
            raise InvalidLimitError(
                f"queue {queue!r}: a queue's shared limit takes --rate, --burst and "
                f"--concurrency, not --{', --'.join(extra)} (add --account or --default)")
        if clear:
            clear_queue_limit(app, queue)
        elif options:
            set_queue_limit(app, queue, **options)
        return queue_limits_text(store, queue)
    if account is None:
        if options or clear:
            raise InvalidLimitError(f"--{', --'.join(options) or 'clear'} set a limit: add "
                                    "--default (the default limit), --account or --queue")
        return account_limits_text(store.limits()) + "\n\n" + queue_limits_text(store)
    if clear:
        clear_account_limit(app, account, queue)
    elif options:
        set_account_limit(app, account, queue=queue, **options)
    own = store.get_limit(account, queue)
    where = "" if queue is None else f" in queue {queue!r}"
    if own is None:
        return f"Account {account!r}: no limit of its own{where}, the default applies"
    return f"Account {account!r}{where}: {limit_text(own)}; weight {own.weight}"


def account_limits_text(limits: Iterable[tuple[str, AccountLimit]], most: int = 200) -> str:
    """The accounts' own limits with their weights (`fairqueue limits`), up to ``most``."""
    rows = [[account, limit_text(limit), str(limit.weight)]
            for account, limit in itertools.islice(limits, most)]
    if not rows:
        return "No account has a limit of its own."
    return render(["ACCOUNT", "LIMIT", "WEIGHT"], rows)


def queue_limits_text(store: Any, queue: str | None = None, most: int = 200) -> str:
    """The queues' shared limits, their defaults for accounts and the accounts' limits in one
    queue (of ``queue`` alone, or of every queue), up to ``most`` rows."""
    rows = [[name, "shared by its accounts", limit_text(limit)]
            for name, limit in store.queue_limits() if queue in (None, name)]
    scoped = ((name, account, limit) for name, account, limit in store.limits_in_queues()
              if queue in (None, name))
    rows += [[name, "default for its accounts" if account is None else f"account {account}",
              limit_text(limit)] for name, account, limit in itertools.islice(scoped, most)]
    if not rows:
        return (f"Queue {queue!r} has no limit of its own." if queue is not None
                else "No queue has a limit of its own.")
    return render(["QUEUE", "SCOPE", "LIMIT"], sorted(rows)[:most])
