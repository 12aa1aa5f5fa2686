"""Pod slices, from the notebook's side: record cells, check everything, write the run, start it on every host, follow it.

`recording` keeps the `%%tpu_prepare` cells and `cell_checks` checks a pod
run's cells; `slice_checks` chooses the backend and checks the slice;
`program` writes the run directory (its format: `tpu_nb.wire.run_directory`);
`starting` starts a run and `pod_run` follows it (the same life as a local
run), `pod_stop` brings every host to the same last step, a `reaper` ends it
if the kernel dies; `api` is
`tpu_nb.pod`'s work. `backends` are the cloud tools. What runs on each host
is `tpu_nb.workers.processes.pod_host`; the events between them are
`tpu_nb.wire.host_lines`.
"""
