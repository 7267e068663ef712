// Postgres: filled in by its issue.
