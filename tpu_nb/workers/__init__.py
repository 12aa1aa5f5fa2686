"""What runs in the processes tpu_nb forks: the supervisor and one worker per device.

`supervisor` runs `xmp.spawn`; each `worker` runs the kernel's program
(`programs`), sends what it prints (`output`) and its progress (`reporting`,
with what it reads of its device stack in `device_readings`, and
`trainer_hook`) as events, and hands back its result or its exception
(`tracebacks`) through `tpu_nb.wire`. Nothing here imports `tpu_nb.kernel`.
"""
