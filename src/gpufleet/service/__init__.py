"""The use cases. Importing any of them installs the session events that keep placement's
per-rack summary in step with every commit (:mod:`gpufleet.service.placement_index`)."""

from gpufleet.service import placement_index as _placement_index  # noqa: F401  (its events)
