"""The jobs' searchable arguments (``Job.args_text``), with a trigram index on PostgreSQL.

The admin searches the column with ``icontains`` (``UPPER(args_text::text) LIKE UPPER(%s)``),
which no b-tree index serves; a GIN trigram index on that expression does. It needs the
``pg_trgm`` extension (trusted since PostgreSQL 13: a database owner may create it); where it
cannot be created, the search still works, scanning the table, and the migration says so.
Other databases get the column only. Jobs recorded before this migration have an empty
``args_text`` until their next event: they are found by key, task id or account.
"""

import logging

from django.db import DatabaseError, migrations, models, transaction

logger = logging.getLogger(__name__)

INDEX = "fq_job_args_trgm"


def create_trigram_index(apps, schema_editor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    table = schema_editor.quote_name(apps.get_model("celery_fairqueue", "Job")._meta.db_table)
    try:
        with transaction.atomic(using=schema_editor.connection.alias):
            schema_editor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
            schema_editor.execute(f"CREATE INDEX IF NOT EXISTS {INDEX} ON {table} "
                                  "USING gin ((UPPER(args_text::text)) gin_trgm_ops)")
    except DatabaseError as exc:
        logger.warning("celery_fairqueue: no trigram index on the jobs' arguments (%s); the "
                       "jobs search by argument scans the table instead", exc)


def drop_trigram_index(apps, schema_editor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP INDEX IF EXISTS {INDEX}")


class Migration(migrations.Migration):

    dependencies = [
        ('celery_fairqueue', '0004_accountlimit_weight'),
    ]

    operations = [
        migrations.AddField(
            model_name='job',
            name='args_text',
            field=models.CharField(blank=True, default='', help_text='The redacted arguments as the jobs search reads them: a line name=value each (search.arguments_text), cut to 2,000 characters.', max_length=2000),
        ),
        migrations.RunPython(create_trigram_index, drop_trigram_index, elidable=True),
    ]
