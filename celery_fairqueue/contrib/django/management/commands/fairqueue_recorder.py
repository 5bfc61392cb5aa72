"""``manage.py fairqueue_recorder``: record fair-queue job state until SIGTERM or SIGINT."""

from __future__ import annotations

import gc
import signal
import threading
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from ...conf import celery_app
from ...recording.recorder import Recorder, default_consumer_name


class Command(BaseCommand):
    help = ("Apply the fair queue's event stream to the Job and Attempt tables until stopped. "
            "Several may run: they share the event streams (one per shard of the store), each "
            "led by one of them at a time; with one stream, one records and the others stand "
            "by.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--consumer", default=default_consumer_name(),
                            help="This recorder's name in the stream's consumer group.")
        parser.add_argument("--batch", type=int, default=2000, help="Events per transaction.")
        parser.add_argument("--block-ms", type=int, default=500,
                            help="How long one read waits for new events.")
        parser.add_argument("--lock-seconds", type=float, default=30.0,
                            help="Within how long the others take over the streams of a "
                                 "recorder that died.")

    def handle(self, *args: Any, **options: Any) -> None:
        stop = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
        recorder = Recorder(celery_app(), options["consumer"], batch=options["batch"],
                            lock_seconds=options["lock_seconds"],
                            block_ms=options["block_ms"])
        gc.freeze()  # what is loaded by now lives as long as the process: never scan it again
        self.stdout.write(f"fairqueue recorder {recorder.consumer_name}: recording; stop with "
                          "SIGTERM or Ctrl-C", ending="\n")
        self.stdout.flush()
        recorder.run_forever(stop)
        self.stdout.write(f"fairqueue recorder {recorder.consumer_name}: stopped")
