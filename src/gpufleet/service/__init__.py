"""The use cases, in bounded contexts (see docs/architecture.md). The session events that keep
placement's per-rack summary in step with every commit
(:mod:`gpufleet.service.allocation.placement_index`) are installed where a database is opened
(:mod:`gpufleet.service.core.fleet`, :mod:`gpufleet.service.core.schema`), so importing a
light service module does not import the store."""
