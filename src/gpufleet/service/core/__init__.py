"""The core every context builds on: the fleet context, the lifecycle's single writer, selectors,
the claim pipeline, alarms and the webhook outbox, policies, tokens, pruning, the schema use
case and background-failure accounting.
"""
