"""Sweepstack core: the sweep spec, search space, settings, errors, broker names and the store.

Nothing here imports torch, Celery workers or Flask; every other package may import it.
"""
