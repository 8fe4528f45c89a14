"""The Celery app, configured from settings when first used (not at import), and nothing
else: `tasks` registers the task wrappers on it, `tasks_client` sends work by task name."""

from __future__ import annotations

from typing import Any

from celery import Celery

from mosoo_core.settings import get_settings

app = Celery("mosoo")


def _configuration() -> dict[str, Any]:
    settings = get_settings()
    return {
        "broker_url": settings.redis_url,
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "task_ignore_result": True,
        "broker_connection_retry_on_startup": True,
        "worker_hijack_root_logger": False,
        # A web request must not hang on a dead broker: the outbox sweep retries later.
        "task_publish_retry_policy": {"max_retries": 2, "interval_start": 0, "interval_step": 0.5},
        "beat_schedule": {
            "sweep-pending-email": {"task": "mosoo.sweep_pending_email", "schedule": 60.0},
            "purge-sign-in-records": {"task": "mosoo.purge_sign_in_records", "schedule": 3600.0},
            "sweep-sandboxes": {"task": "mosoo.sweep_sandboxes", "schedule": 60.0},
            "sweep-files": {"task": "mosoo.sweep_files", "schedule": 3600.0},
            "sweep-environment-builds": {
                "task": "mosoo.sweep_environment_builds",
                "schedule": 300.0,
            },
            "collect-skill-files": {"task": "mosoo.collect_skill_files", "schedule": 3600.0},
            "hibernate-idle-pets": {"task": "mosoo.hibernate_idle_pets", "schedule": 60.0},
            # Dead or stale warm pool members replaced, unwanted keys dropped, the rest refilled.
            "maintain-pool": {"task": "mosoo.pool_maintain", "schedule": 30.0},
            # Today's usage is rolled up every 10 minutes; pruning follows in the same task.
            "roll-up-usage": {"task": "mosoo.roll_up_usage", "schedule": 600.0},
        },
        "beat_schedule_filename": str(
            (settings.data_dir / "run" / "celerybeat-schedule").resolve()
        ),
    }


# A promise: Celery calls it when the configuration is first read (first send, worker start).
app.add_defaults(_configuration)


def configured_app() -> Celery:
    """The app, its broker following the current settings: a process whose settings change
    (a test moving to another Redis database) gets fresh broker connections, not the old ones."""
    if app.conf.broker_url != get_settings().redis_url:
        app.conf.update(_configuration())
        app._after_fork()  # Celery's own reset of its connection and producer pools
    return app
