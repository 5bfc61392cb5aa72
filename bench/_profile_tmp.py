import sys, time
from bench import redis_cost as rc
from bench._common import redis_server, workers
kind = sys.argv[1] if len(sys.argv) > 1 else "fair+stream"
W, C = int(sys.argv[2]) if len(sys.argv)>2 else 1, int(sys.argv[3]) if len(sys.argv)>3 else 4
jobs = 2000
with redis_server() as server:
    module = rc.app_of(kind)
    task = module.plain_keyed_noop if kind == "plain" else module.fair_keyed_noop
    client = rc.fresh(server, kind)
    client.config_resetstat()
    for n in range(jobs):
        task.delay(f"acct{n % 10}", n)
    enq = client.info("commandstats"); client.config_resetstat()
    with workers(server, W, app=module.__name__, pool="threads", concurrency=C):
        while int(client.get("done") or 0) < jobs: time.sleep(0.05)
    drn = client.info("commandstats")
    for label, st in (("enqueue", enq), ("drain", drn)):
        tot = sum(v["calls"] for v in st.values())
        print(label, f"{tot/jobs:.1f}/job")
        for k, v in sorted(st.items(), key=lambda kv: -kv[1]["calls"]):
            if v["calls"] >= jobs * 0.05: print(f"   {k:24} {v['calls']/jobs:6.2f}  {v['usec']/jobs:6.1f}us")
