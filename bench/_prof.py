import time
from bench._common import redis_server
with redis_server() as server:
    from bench import app
    from celery_fairqueue.store import store_for
    store = store_for(app.app)
    c = server.client()
    for n in range(200):
        app.fair_keyed_noop.delay(f"acct{n % 10}", n)
    c.flushall(); c.config_resetstat()
    t=time.perf_counter()
    for n in range(3000):
        app.fair_keyed_noop.delay(f"acct{n % 10}", n)
    print("delay/s", 3000/(time.perf_counter()-t))
    st = c.info("commandstats")
    for k, v in sorted(st.items(), key=lambda kv: -kv[1]["usec"]):
        print(f"{k:28} calls/job {v['calls']/3000:5.2f}  us/job {v['usec']/3000:6.2f}")
    print(len(c.hget("{fairqueue}:records", c.hkeys("{fairqueue}:records")[0])))
