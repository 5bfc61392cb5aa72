"""Job state, attempt history, account and queue limits, written by the recorder and the admin."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import models, transaction

from ...errors import InvalidLimitError
from ...limits import AccountLimit as Limit
from ...limits import check_queue_name


class Job(models.Model):
    """One business job: all its deliveries (retries, redeliveries) share this row."""

    class Status(models.TextChoices):
        READY = "ready"
        DEFERRED = "deferred"
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        FAILED = "failed"
        DEAD = "dead"
        REVOKED = "revoked"

    job_key = models.CharField(
        max_length=200, unique=True,
        help_text="The business key (sha256 of task, account and identity), or task:<id>.")
    task_id = models.CharField(max_length=255, db_index=True)
    delivery_id = models.CharField(max_length=300, help_text="The current delivery, id:retries.")
    task = models.CharField(max_length=255)
    queue = models.CharField(max_length=255)
    account = models.CharField(max_length=1024)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.READY)
    attempts = models.PositiveIntegerField(default=0)
    args = models.JSONField(default=dict, blank=True, help_text="Arguments, redacted.")
    args_text = models.CharField(
        max_length=2000, blank=True, default="",
        help_text="The redacted arguments as the jobs search reads them: a line "
                  "name=value each (search.arguments_text), cut to 2,000 characters.")
    enqueued_at = models.DateTimeField(null=True, blank=True)
    next_run_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    waiting_since = models.DateTimeField(
        null=True, blank=True,
        help_text="Since when the job could run but has not started (its due time for a "
                  "countdown, eta or retry); empty while it runs and once it has finished.")
    dead_reason = models.CharField(
        max_length=255, blank=True,
        help_text='Why it was dead-lettered: the failure ("permanent: ...") or "gave up '
                  'after N attempts: ...".')
    external_id = models.CharField(max_length=255, blank=True)
    worker = models.CharField(max_length=255, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-enqueued_at"]
        # Each index costs the recorder every row it writes, so only these, each for the
        # queries named (plans in docs/deployment.md, "The Job table's indexes"):
        indexes = [
            # an account's jobs: the overview's rows and pages by account, the account page,
            # the admin's account filter, an account's oldest ready job
            models.Index(fields=["account", "status"], name="fq_job_account_status"),
            # a status's jobs by when they finished: the pruner, throughput, dead letters in
            # the last hour, the admin's status filters and dead letters, oldest ready job
            models.Index(fields=["status", "finished_at"], name="fq_job_status_finished"),
            # the overview's walk by oldest waiting job: only the jobs that wait
            models.Index(fields=["waiting_since", "account"], name="fq_job_waiting",
                         condition=models.Q(waiting_since__isnull=False)),
        ]
        permissions = [
            ("replay_job", "Can replay dead jobs"),
            ("purge_job", "Can purge dead jobs"),
            ("cancel_job", "Can cancel waiting jobs"),
            ("run_job_now", "Can run delayed jobs now"),
        ]

    def __str__(self) -> str:
        return f"{self.task} [{self.account}] {self.status}"

    def latest_attempt(self) -> Attempt | None:
        """The job's latest attempt as this row tells it, unsaved: the recorder writes an
        Attempt row only for an attempt that ended other than in success or was followed by
        another (fold.py), so a running or succeeded job's latest attempt is often here only.
        None when it has not run, or its attempt ended otherwise (it has its row then)."""
        outcomes = {self.Status.RUNNING: Attempt.Outcome.RUNNING,
                    self.Status.SUCCEEDED: Attempt.Outcome.SUCCEEDED}
        if self.started_at is None or self.status not in outcomes:
            return None
        return Attempt(job=self, number=self.attempts, delivery_id=self.delivery_id,
                       worker=self.worker, started_at=self.started_at,
                       finished_at=self.finished_at if self.status == self.Status.SUCCEEDED
                       else None, outcome=outcomes[self.status])

    def attempt_list(self) -> list[Attempt]:
        """Every attempt, oldest first: the Attempt rows, and the latest attempt when only
        this row tells it (:meth:`latest_attempt`)."""
        attempts = list(self.attempt_history.order_by("id"))
        latest = self.latest_attempt()
        if latest is not None and not any(
                a.delivery_id == latest.delivery_id and a.started_at == latest.started_at
                for a in attempts):
            attempts.append(latest)
        return attempts


class DeadJob(Job):
    """The dead-letter queue in the admin: jobs whose status is dead."""

    class Meta:
        proxy = True
        verbose_name = "dead letter"
        verbose_name_plural = "dead letters"


class Account(Job):
    """The accounts in the admin: one page per account, read from Redis and the recorded jobs.

    A proxy without rows of its own: it gives the account pages their place in the admin index
    and a content type for the admin log, and holds the operator permissions on accounts.
    """

    class Meta:
        proxy = True
        verbose_name = "account"
        verbose_name_plural = "accounts"
        default_permissions = ("view",)
        permissions = [
            ("pause_account", "Can pause accounts and queues"),
            ("resume_account", "Can resume paused accounts and queues"),
            ("edit_account_limit", "Can edit account limits from the account page"),
            ("lift_slow_down", "Can lift a provider's slow-down of accounts and queues"),
        ]


class Attempt(models.Model):
    """One delivery of a job to a worker, and how it ended."""

    class Outcome(models.TextChoices):
        RUNNING = "running"
        SUCCEEDED = "succeeded"
        RETRYING = "retrying"
        FAILED = "failed"
        REQUEUED = "requeued"
        DEAD = "dead"

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="attempt_history")
    number = models.PositiveIntegerField()
    delivery_id = models.CharField(max_length=300)
    worker = models.CharField(max_length=255, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    outcome = models.CharField(max_length=16, choices=Outcome.choices, default=Outcome.RUNNING)
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["job", "id"]
        indexes = [models.Index(fields=["delivery_id"], name="fq_attempt_delivery")]

    def __str__(self) -> str:
        return f"attempt {self.number} of job {self.job_id}: {self.outcome}"


class AccountLimit(models.Model):
    """An account's limit, as the admin shows and edits it.

    The fair store (Redis) owns limits: workers read them there, and ``set_account_limit`` from
    code writes them there. These rows mirror it (:meth:`mirror_store`, run whenever the admin
    lists or opens limits), and saving or deleting a row goes through the same
    ``set_account_limit``/``clear_account_limit`` that code uses.
    """

    account = models.CharField(max_length=1024, unique=True)
    rate = models.CharField(max_length=32, blank=True, help_text='Celery format: "10/s".')
    burst = models.FloatField(null=True, blank=True)
    concurrency = models.PositiveIntegerField(null=True, blank=True)
    window = models.CharField(max_length=11, blank=True, help_text='"09:00-17:00"')
    tz = models.CharField(max_length=64, blank=True, help_text='IANA zone: "Europe/Berlin"')
    weight = models.PositiveIntegerField(
        default=1, blank=True,
        help_text="Share of the workers beside accounts of weight 1, while both wait "
                  "(4: four jobs to their one).")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["account"]

    def __str__(self) -> str:
        return self.account

    def as_limit(self) -> Limit:
        return Limit(rate=self.rate or None, burst=self.burst, concurrency=self.concurrency,
                     window=self.window or None, tz=self.tz or None, weight=self.weight)

    def clean(self) -> None:
        try:
            self.as_limit()
        except InvalidLimitError as exc:
            raise ValidationError(str(exc)) from None

    def save(self, *args, **kwargs) -> None:
        self.full_clean()
        super().save(*args, **kwargs)
        transaction.on_commit(self.push)

    def delete(self, *args, **kwargs):
        account = self.account
        result = super().delete(*args, **kwargs)
        transaction.on_commit(lambda: _celery_app_clear(account))
        return result

    def push(self) -> None:
        """Write this limit to the fair store."""
        from ... import set_account_limit
        from .conf import celery_app

        limit = self.as_limit()
        set_account_limit(celery_app(), self.account, rate=limit.rate, burst=limit.burst,
                          concurrency=limit.concurrency, window=limit.window, tz=limit.tz,
                          weight=limit.weight)


    @classmethod
    def mirror_store(cls) -> int:
        """Make the rows what the fair store holds; returns how many limits it holds."""
        from ...store import store_for
        from .conf import celery_app

        held = {account: limit for account, limit in store_for(celery_app()).limits()
                if len(account) <= cls._meta.get_field("account").max_length}
        rows = [cls(account=account, rate=limit.rate or "", burst=limit.burst,
                    concurrency=limit.concurrency, window=limit.window or "", tz=limit.tz or "",
                    weight=limit.weight)
                for account, limit in held.items()]
        with transaction.atomic():
            gone = set(cls.objects.values_list("account", flat=True)) - held.keys()
            for start in range(0, len(gone), 500):  # querysets bypass the push of delete()
                cls.objects.filter(account__in=list(gone)[start:start + 500]).delete()
            cls.objects.bulk_create(rows, batch_size=500, update_conflicts=True,
                                    unique_fields=["account"],
                                    update_fields=["rate", "burst", "concurrency", "window",
                                                   "tz", "weight"])
        return len(held)


class QueueLimit(models.Model):
    """A queue's shared limit (all its accounts together), as the admin shows and edits it;
    mirrored from the fair store, which owns it, as AccountLimit is (``set_queue_limit``)."""

    queue = models.CharField(max_length=1024, unique=True)
    rate = models.CharField(max_length=32, blank=True, help_text='Celery format: "1000/m".')
    burst = models.FloatField(null=True, blank=True)
    concurrency = models.PositiveIntegerField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["queue"]

    def __str__(self) -> str:
        return self.queue

    def as_limit(self) -> Limit:
        return Limit(rate=self.rate or None, burst=self.burst, concurrency=self.concurrency)

    def clean(self) -> None:
        try:
            check_queue_name(self.queue)
            self.as_limit()
        except InvalidLimitError as exc:
            raise ValidationError(str(exc)) from None

    def save(self, *args, **kwargs) -> None:
        self.full_clean()
        super().save(*args, **kwargs)
        transaction.on_commit(self.push)

    def delete(self, *args, **kwargs):
        queue = self.queue
        result = super().delete(*args, **kwargs)
        transaction.on_commit(lambda: _clear_queue_limit(queue))
        return result

    def push(self) -> None:
        """Write this limit to the fair store."""
        from ... import set_queue_limit
        from .conf import celery_app

        limit = self.as_limit()
        set_queue_limit(celery_app(), self.queue, rate=limit.rate, burst=limit.burst,
                        concurrency=limit.concurrency)

    @classmethod
    def mirror_store(cls) -> int:
        """Make the rows what the fair store holds; returns how many queue limits it holds."""
        from ...store import store_for
        from .conf import celery_app

        held = dict(store_for(celery_app()).queue_limits())
        with transaction.atomic():
            cls.objects.exclude(queue__in=list(held)).delete()
            cls.objects.bulk_create(
                [cls(queue=queue, rate=limit.rate or "", burst=limit.burst,
                     concurrency=limit.concurrency) for queue, limit in held.items()],
                update_conflicts=True, unique_fields=["queue"],
                update_fields=["rate", "burst", "concurrency"])
        return len(held)


def _clear_queue_limit(queue: str) -> None:
    from ... import clear_queue_limit
    from .conf import celery_app

    clear_queue_limit(celery_app(), queue)


def _celery_app_clear(account: str) -> None:
    from ... import clear_account_limit
    from .conf import celery_app

    clear_account_limit(celery_app(), account)
