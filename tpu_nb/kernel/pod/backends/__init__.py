"""Where a pod run runs, through the cloud tools: gcloud for a TPU VM slice, kubectl for GKE.

Wrappers around command-line tools that know nothing of notebooks:
`commands` (never interactive, never left running), `slices` (accelerator
types), `tpu_vm` (gcloud), `jobset` and `gke` (kubectl), and `protocol`,
what every backend offers the run that follows it.
"""
