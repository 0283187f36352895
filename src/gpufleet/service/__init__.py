"""The use cases, in bounded contexts ordered by an import-linter contract (pyproject.toml;
see docs/architecture.md): background > campaigns > exports > views > health > allocation >
hosts > core. A context imports only the ones below it."""
