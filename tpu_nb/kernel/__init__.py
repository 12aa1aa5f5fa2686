"""What runs in the notebook's own process (the kernel), which never touches an XLA device.

Rooms by the part of a run they serve: `planning/` (options, checks, the
workers' environment), `run/` (a run's life, on this machine or in the
background), `notebook/` (what a cell shows and gets back), `endings/` (how
a run ended, said once), `progress/` (the dashboard), `stalls/` (a run gone
quiet), `tpu/` (the chips seen from here), `pod/` (pod slices).

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
