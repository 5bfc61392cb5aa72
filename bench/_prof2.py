import time, uuid
from bench._common import redis_server
from celery_fairqueue.store.lua import load_script
from celery_fairqueue.store.door import wire
with redis_server() as server:
    from bench import app
    from celery_fairqueue.store import store_for
    store = store_for(app.app)
    c = server.client()
    keys = store._keys_for("enqueue", [store.keys.queue("celery")])
    base = load_script("enqueue").source
    def variant(name, src, n=4000):
        c.flushall()
        sha = c.script_load(src)
        c.config_resetstat()
        for i in range(n):
            args = store._enqueue_args(queue="celery", account=f"acct{i%10}", job_id=str(uuid.uuid4())+":0",
                                       envelope="x"*900, job_key=f"key{i}", task="t", shown_args='{"a": 1}')
            args.append("")
            c.evalsha(sha, len(keys), *keys, *[wire(a) for a in args])
        st = c.info("commandstats")
        tot = st["cmdstat_evalsha"]["usec"]/n
        inner = sum(v["usec"] for k, v in st.items() if k not in ("cmdstat_evalsha","cmdstat_config|resetstat"))/n
        print(f"{name:30} evalsha {tot:6.1f} us  inner {inner:5.1f}")
    variant("full", base)
    lib_end = base.index("-- ---- end of _lib.lua ----")
    variant("return at body start", base[:lib_end] + "\nreturn 1")
    variant("empty", "return 1")
    variant("no emit", base.replace("emit('e', 'enqueued'", "local _ = ('e', 'enqueued'" if False else "emit = function() end; emit('e', 'enqueued'"))
