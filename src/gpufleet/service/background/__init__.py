"""Work that runs without a person waiting: the job queue, queued runs and periodic tasks."""
