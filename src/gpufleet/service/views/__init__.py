"""Read models that compose contexts: the host page, host listings, timeline, overview,
summary, run views.
"""
