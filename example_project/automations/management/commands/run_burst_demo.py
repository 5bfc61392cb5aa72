"""A bursty multi-account campaign, sent once as plain Celery tasks and once as FairTask jobs.

One big account enqueues a burst, then small accounts enqueue a few steps each. A live table
shows each account's progress; at the end a PNG plots per-account completions over time for
both runs, and the small accounts' wait for their first message is compared.
"""

import time
from collections import Counter
from pathlib import Path

from django.core.management.base import BaseCommand
from django.db.models import Max

from automations.models import OutboundMessage
from automations.tasks import send_step, send_step_plain

BURST = {"whale": 120, "small-1": 8, "small-2": 8, "small-3": 8, "small-4": 8}
STEP = "burst"


class Command(BaseCommand):
    help = "Run the same bursty campaign as plain Celery tasks and as FairTask jobs; plot both."

    def add_arguments(self, parser):
        parser.add_argument("--plot", default="fair-vs-plain.png", help="PNG file to write")
        parser.add_argument("--timeout", type=float, default=120.0)

    def handle(self, *args, plot: str, timeout: float, **options):
        runs = {}
        for kind, task in (("plain Celery", send_step_plain), ("FairTask", send_step)):
            runs[kind] = self.campaign(kind, task, timeout)
        self.report(runs)
        self.plot(runs, Path(plot))

    def campaign(self, kind, task, timeout):
        rev = (OutboundMessage.objects.aggregate(rev=Max("campaign_rev"))["rev"] or 0) + 1
        self.stdout.write(f"\n{kind}: {sum(BURST.values())} steps, the big account first")
        started = time.time()
        results = [(account, task.delay(account, lead, STEP, rev))
                   for account, leads in BURST.items() for lead in range(leads)]
        done: dict[str, list[float]] = {account: [] for account in BURST}
        pending = list(results)
        deadline = time.monotonic() + timeout
        next_table = 0.0
        while pending and time.monotonic() < deadline:
            still = []
            for account, result in pending:
                if result.ready():
                    done[account].append(result.get()["finished_at"] - started)
                else:
                    still.append((account, result))
            pending = still
            if time.monotonic() >= next_table or not pending:
                self.table(done, time.time() - started)
                next_table = time.monotonic() + 1.0
            time.sleep(0.05)
        if pending:
            raise SystemExit(f"{kind}: {len(pending)} steps not done within {timeout}s")
        return done

    def table(self, done, elapsed):
        counts = Counter({account: len(times) for account, times in done.items()})
        cells = "  ".join(f"{account} {counts[account]:>3}/{BURST[account]:<3}"
                          for account in BURST)
        self.stdout.write(f"  {elapsed:5.1f}s  {cells}")

    def report(self, runs):
        self.stdout.write("\nfirst message of each small account, seconds after the burst:")
        for kind, done in runs.items():
            firsts = [min(done[a]) for a in BURST if a != "whale"]
            self.stdout.write(f"  {kind:<13} slowest {max(firsts):5.2f}s, fastest "
                              f"{min(firsts):5.2f}s; the big account finished at "
                              f"{max(done['whale']):5.2f}s")

    def plot(self, runs, path):
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            self.stdout.write("matplotlib is not installed: no plot (pip install matplotlib)")
            return
        figure, axes = plt.subplots(1, len(runs), figsize=(11, 4), sharey=True)
        for axis, (kind, done) in zip(axes, runs.items(), strict=True):
            for account, times in done.items():
                times = sorted(times)
                axis.step(times, range(1, len(times) + 1), where="post", label=account)
            axis.set_title(kind)
            axis.set_xlabel("seconds after the burst")
        axes[0].set_ylabel("messages sent")
        axes[0].set_yscale("log")
        axes[-1].legend(loc="lower right")
        figure.suptitle("Per-account completions: one big account's burst, four small accounts")
        figure.tight_layout()
        figure.savefig(path, dpi=100)
        self.stdout.write(self.style.SUCCESS(f"plot written to {path.resolve()}"))
