"""Fewer indexes on the Job table: each one costs the recorder every row it writes.

Kept: (account, status), (status, finished_at), and (waiting_since, account) for the jobs that
wait only (a finished job leaves it). Dropped: (queue, status, enqueued_at), (status,
next_run_at) and (account, waiting_since), whose queries the others serve (the plans are in
docs/deployment.md, "The Job table's indexes"). The partial index is built by one scan of the
table, during which the recorder waits: about a second per million jobs.
"""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('celery_fairqueue', '0005_job_args_text'),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name='job',
            name='fq_job_queue_status',
        ),
        migrations.RemoveIndex(
            model_name='job',
            name='fq_job_status_next_run',
        ),
        migrations.RemoveIndex(
            model_name='job',
            name='fq_job_account_waiting',
        ),
        migrations.RemoveIndex(
            model_name='job',
            name='fq_job_waiting',
        ),
        migrations.AddIndex(
            model_name='job',
            index=models.Index(condition=models.Q(('waiting_since__isnull', False)), fields=['waiting_since', 'account'], name='fq_job_waiting'),
        ),
    ]
