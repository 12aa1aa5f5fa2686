"""What runs in the processes tpu_nb forks: the supervisor and one worker per device.

`supervisor` runs `xmp.spawn` (or, on TorchTPU, a process per chip:
`chip_ranks`); each `worker` runs the kernel's program (`programs`), sends
what it prints (`printed_output`) and its progress (`reporting`, with what
it reads of its device in `device_readings`, and `trainer/` for a Trainer)
as events, and hands back its result or its exception (`tracebacks`)
through `tpu_nb.wire`. Rooms: `checkpoints/` (saved, checked, resumed),
`trainer/`, `stalls/` (the watchdog, stack dumps), `doctor/` (the XLA
doctor); `pod_host` is a pod host's part. Nothing here imports
`tpu_nb.kernel`.
"""
