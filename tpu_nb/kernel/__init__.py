"""What runs in the notebook's own process (the kernel), which never touches an XLA device.

The rule for rooms: what every run goes through has a room by the part of a
run it serves: `planning/` (options, checks, the workers' environment),
`run/` (a run's life, on this machine or in the background), `notebook/`
(what a cell shows and gets back), `endings/` (how a run ended, said once),
`progress/` (the dashboard), `stalls/` (a run gone quiet), `history/` (the
run log and `%tpu_runs`). What only one kind of run or one magic needs has
a room of its own, all of it there, its checks included: `trials/` (sweeps
and searches: trials side by side), `pod/` (pod slices), `tpu/` (the chips
seen from here, `%tpu_release`).

`launching` (`tpu_nb.launch`) is the entry point; the magics' IPython glue
(`tpu_nb.magics`) is a floor above the kernel. Every run lives the life `followed_run` writes once (start, events,
graceful and hard stops, the timeout, its ending): on this machine a
`local_run.Run` checks (`preflight`), forks the workers (`processes`,
`forking`) and reads their events; on a pod slice `pod` does the same
through gcloud or kubectl. `endings` turns every outcome into the
notebook's words and exception; `returns` hands a run's results back to the
notebook; `background` follows a run while the notebook stays free;
`progress` turns the workers' reports into the dashboard.
"""
