"""The use cases. The session events that keep placement's per-rack summary in step with
every commit (:mod:`gpufleet.service.placement_index`) are installed where a database is
opened (:mod:`gpufleet.service.fleet`, :mod:`gpufleet.service.schema`), so importing a light
service module does not import the store."""
