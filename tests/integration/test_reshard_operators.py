"""An operator's pause, resume or limit change while a reshard moves the account (issue 36),
on a real redis-server: refused with a clear error while the account moves (a resume must never
lift the reshard's own freeze, and a change made between two copies would be carried over by
the next one, or lost), sent on to the account's new shard once it moved away, which a process
that has not re-read the store's number of shards still asks the old shard about."""

import pytest

from celery_fairqueue.errors import AccountMovingError
from celery_fairqueue.limits import AccountLimit
from celery_fairqueue.reasons import reason_text
from celery_fairqueue.settings import FairqueueSettings
from celery_fairqueue.states import Reason
from celery_fairqueue.store import ConsoleReader, FairStore, open_store
from celery_fairqueue.store.formats.keys import encode_id
from celery_fairqueue.store.shards.account_move import AccountMover, reshard_pause
from celery_fairqueue.store.shards.placement import account_shard
from celery_fairqueue.store.shards.reshard import Resharder

from .conftest import put

NO_LIMIT = AccountLimit().pack(0)
TOKEN = "worker-a"
ACCOUNT = "acme|a b{c}"  # separators and braces: the checks read the account encoded


@pytest.fixture
def frozen(make_store) -> FairStore:
    """A store of 2 shards with a job of ACCOUNT waiting, the account frozen on its shard by a
    reshard's first step, moving to the other shard."""
    store = make_store(shards=2, lease_seconds=30.0)
    put(store, ACCOUNT, 1)
    home = account_shard(ACCOUNT, 2)
    AccountMover(store.shards).freeze(home, {encode_id(ACCOUNT): 1 - home})
    return store


def the_reshards_pause(store: FairStore) -> dict[str, object] | None:
    shard = store.shards[account_shard(ACCOUNT, 2)]
    return reshard_pause(store.client.hget(shard.keys.pauses, f"a:{encode_id(ACCOUNT)}:*"))


def test_a_resume_never_lifts_the_reshards_own_pause(frozen):
    with pytest.raises(AccountMovingError, match="moving it to shard"):
        frozen.resume(ACCOUNT)
    assert the_reshards_pause(frozen) is not None
    claim = frozen.claim(["default"], 10, TOKEN, NO_LIMIT)
    assert claim.leases == []  # its job stays where it waits until the move ends


def test_a_pause_of_a_moving_account_is_refused_not_dropped(frozen):
    with pytest.raises(AccountMovingError, match=r"cannot pause account 'acme\|a b\{c\}'"):
        frozen.pause(ACCOUNT, by="ops", reason="complaint")
    assert [p.by for p in frozen.pauses()] == ["fairqueue reshard"]


def test_a_limit_change_for_a_moving_account_is_refused_until_its_move_ends(frozen):
    with pytest.raises(AccountMovingError, match="change the limit of"):
        frozen.set_limit(ACCOUNT, AccountLimit(rate="5/s"))
    with pytest.raises(AccountMovingError):
        frozen.clear_limit(ACCOUNT)
    assert frozen.get_limit(ACCOUNT) is None


def test_a_queue_pause_and_other_accounts_are_not_held_up_by_a_move(frozen):
    other = next(f"other-{n}" for n in range(100) if account_shard(f"other-{n}", 2) ==
                 account_shard(ACCOUNT, 2))
    assert frozen.pause(other, by="ops").by == "ops"
    assert frozen.resume(other)
    assert frozen.pause(None, "default", by="ops").queue == "default"
    assert frozen.resume(None, "default")


def test_an_operators_change_of_a_moved_account_goes_to_its_new_shard(redis_server,
                                                                      redis_client):
    """A process still on the old number of shards finds the account by it; the old shard
    says where it went, and the change is made there, where the account's claims read it."""
    account = next(f"acct-{n}" for n in range(1000)
                   if account_shard(f"acct-{n}", 16) != account_shard(f"acct-{n}", 4))
    settings = FairqueueSettings(redis_url=redis_server.url, shards=4,
                                 shards_check_interval=3600)
    stale = open_store(settings)
    put(stale, account, 1)
    redis_client.set("{fairqueue}:shards", "4>16")  # the move announced, and read by stale:
    stale.reading.read_now()  # it goes on routing by 4 for an hour after the move ends
    stale.check_shards()
    Resharder(settings, 16, settle=0).run()
    new = open_store(FairqueueSettings(redis_url=redis_server.url, shards=16))
    target = new.shards[account_shard(account, 16)]

    stale.set_limit(account, AccountLimit(rate="7/s"))
    stale.pause(account, by="ops", reason="checking")
    assert target.get_limit(account) == AccountLimit(rate="7/s")
    assert [(p.account, p.by) for p in FairStore.pauses(target)] == [(account, "ops")]
    assert stale.resume(account)
    assert FairStore.pauses(target) == []
    old = stale.shards[account_shard(account, 4)]
    assert old.get_limit(account) is None and FairStore.pauses(old) == []


def test_the_console_says_moving_for_an_account_a_reshard_is_moving(frozen):
    """Not "paused by an operator": the reshard's own pause reads as its move, with where to."""
    [state] = ConsoleReader(frozen).account_state(ACCOUNT)
    assert state.reason == Reason.MOVING
    assert reason_text(state).startswith("moving to shard ")
    assert "its jobs wait until the move ends" in reason_text(state)
    [pause] = frozen.pauses()
    assert (pause.moving_to, pause.by) == (1 - account_shard(ACCOUNT, 2), "fairqueue reshard")
