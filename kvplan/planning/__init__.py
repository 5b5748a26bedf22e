"""Planning: answers composed from the core, the engines and the loaders - the footprint, fit
(pool arithmetic, TP/PP search, verdict), launch lines, the performance model, curves, sweeps,
scenario evaluation and validation against measured runs. Nothing here prints or writes files.
"""
