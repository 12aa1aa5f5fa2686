"""Pod slices, from the notebook's side: record `%%tpu_prepare` cells, build a run's `train.py`, start it on every host, follow it.

Runs in the kernel's process. What runs on each host is `tpu_nb.workers.host`;
the events between them are `tpu_nb.wire.host_lines`.
"""
