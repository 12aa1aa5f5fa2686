"""The processes of a run, top to bottom: a pod host's part (`pod_host`), the `supervisor`, each `worker`,
TorchTPU's process per chip (`chip_ranks`), and the program a worker runs (`programs`).
"""
