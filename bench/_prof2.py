import uuid

from bench._common import redis_server
from celery_fairqueue.store.door import wire
from celery_fairqueue.store.lua import load_script

with redis_server() as server:
    from bench import app
    from celery_fairqueue.store import store_for
    store = store_for(app.app)
    c = server.client()
    keys = store._keys_for("enqueue", [store.keys.queue("celery")])
    base = load_script("enqueue").source
    print(len(keys), "keys")
    def variant(name, src, n=4000, rec="0", stream=False):
        c.flushall()
        if stream: c.xadd(store.keys.events, {"a": 1})
        sha = c.script_load(src)
        c.config_resetstat()
        for i in range(n):
            args = store._enqueue_args(queue="celery", account=f"acct{i%10}", job_id=str(uuid.uuid4())+":0",
                                       envelope="x"*900, job_key=f"key{i}", task="t", shown_args='{"a": 1}')
            args += ["", rec]
            c.evalsha(sha, len(keys), *keys, *[wire(a) for a in args])
        st = c.info("commandstats")
        tot = st["cmdstat_evalsha"]["usec"]/n
        inner = sum(v["usec"] for k, v in st.items() if k not in ("cmdstat_evalsha","cmdstat_config|resetstat"))/n
        print(f"{name:30} evalsha {tot:6.1f} us  inner {inner:5.1f}")
    variant("full no stream", base)
    variant("full stream", base, rec="1", stream=True)
    lib_end = base.index("-- ---- end of _lib.lua ----")
    variant("return at body start", base[:lib_end] + "\nreturn 1")
    variant("empty", "return 1")
    variant("prologue only", base[:base.index("-- Helpers shared")] + "\nreturn 1")
    body = base[lib_end:]
    variant("stop before HSETNX", base.replace("-- the record, written once", "do return 1 end\n-- x"))
    variant("stop before key", base.replace("-- the key's marker before this job", "do return 1 end\n-- x"))
    variant("stop before zlexcount", base.replace("-- the account's ready jobs before this one", "do return 1 end\n-- x"))
    variant("stop before emit", base.replace("emit('e', 'enqueued'", "do return 1 end\nemit('e', 'enqueued'"))
